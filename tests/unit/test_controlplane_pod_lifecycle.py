"""Which controllers a local workload cluster's controller-manager runs, with and without
``PodLifecycle``.

The node lifecycle controller must stay opt-in: it judges every Node by its heartbeats and
Lease renewals, and the benchmarks run the node simulator without Leases, where it would turn
every Node Unknown. The clusters are built, never started: only their command lines are read.
"""

from __future__ import annotations

from pathlib import Path

from machinepool.controlplane import PodLifecycle, WorkloadCluster


def _cluster(tmp_path: Path, pods: PodLifecycle | None) -> WorkloadCluster:
    return WorkloadCluster("w", tmp_path, tmp_path / "bin", "http://127.0.0.1:1", "/w", pods)


def _flag(argv: list[str], name: str) -> str | None:
    found = [a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")]
    assert len(found) <= 1, found
    return found[0] if found else None


def test_a_plain_workload_cluster_runs_no_node_lifecycle_nor_pod_controllers(
    tmp_path: Path,
) -> None:
    argv = _cluster(tmp_path, None)._kcm_argv()
    controllers = set((_flag(argv, "controllers") or "").split(","))
    assert "disruption-controller" in controllers
    assert not controllers & {
        "node-lifecycle-controller",
        "pod-garbage-collector-controller",
        "replicaset-controller",
        "deployment-controller",
    }
    assert _flag(argv, "node-monitor-grace-period") is None


def test_pod_lifecycle_adds_the_controllers_pods_need_with_its_grace(tmp_path: Path) -> None:
    pods = PodLifecycle(node_monitor_grace_seconds=7.5, node_monitor_period_seconds=1)
    argv = _cluster(tmp_path, pods)._kcm_argv()
    controllers = set((_flag(argv, "controllers") or "").split(","))
    assert {
        "disruption-controller",
        "node-lifecycle-controller",
        "pod-garbage-collector-controller",
        "replicaset-controller",
        "deployment-controller",
        "token-cleaner-controller",
    } <= controllers
    assert _flag(argv, "node-monitor-grace-period") == "7500ms"
    assert _flag(argv, "node-monitor-period") == "1000ms"
