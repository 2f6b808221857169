"""When `machinepool rollout status` and the demo call a pool rolled out, or failed."""

from __future__ import annotations

from typing import Any

from machinepool.cli.pools import failed, rolled_out


def _pool(version: str, versions: list[dict[str, Any]], **counters: int) -> dict[str, Any]:
    status = {"observedGeneration": 2, "replicas": 3, "readyReplicas": 3, "upToDateReplicas": 3}
    status.update(counters)
    return {
        "metadata": {"name": "p", "generation": 2},
        "spec": {"replicas": 3, "template": {"spec": {"version": version}}},
        "status": {**status, "versions": versions},
    }


def test_a_version_change_is_not_done_while_every_node_runs_the_old_version() -> None:
    # Right after the change every counter still says done: a pool Machine stays UpToDate until
    # it is deleted, so only the versions tell the rollout has not started.
    assert not rolled_out(_pool("v1.34.4", [{"version": "v1.33.4", "replicas": 3}]))


def test_a_rollout_half_way_is_not_done() -> None:
    versions = [{"version": "v1.33.4", "replicas": 1}, {"version": "v1.34.4", "replicas": 2}]
    assert not rolled_out(_pool("v1.34.4", versions))


def test_every_replica_on_the_desired_version_and_ready_is_done() -> None:
    assert rolled_out(_pool("v1.34.4", [{"version": "v1.34.4", "replicas": 3}]))
    assert not rolled_out(
        _pool("v1.34.4", [{"version": "v1.34.4", "replicas": 3}], readyReplicas=2)
    )


def test_a_terminal_failure_is_read_from_the_failure_fields_not_the_phase() -> None:
    # The core never sets phase Failed (upstream's v1beta2 API deprecates it).
    pool = _pool("v1.34.4", [{"version": "v1.34.4", "replicas": 3}])
    pool["status"]["phase"] = "Running"
    assert failed(pool) is None
    message = "MachinePool infrastructure resource SimMachinePool ns/p has been deleted"
    pool["status"]["deprecated"] = {
        "v1beta1": {"failureReason": "InvalidConfiguration", "failureMessage": message}
    }
    assert failed(pool) == message
    pool["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert failed(pool) is None
