"""/metrics of a running ``machinepool run``, read as Prometheus reads it.

The scrape is parsed by prometheus_client's text parser (what a Prometheus-compatible scraper
accepts), and the families and labels that controller-runtime's and Cluster API's dashboards
query must be there, with the label sets of controller-runtime 0.24: reconcile totals by result,
errors, terminal errors, reconcile durations, workqueue depth, adds, retries, queue latency and
work duration, per controller, and moving once a pool is reconciled.
"""

from __future__ import annotations

import asyncio
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from tests.support.resources import KUBEADM_CONFIGS

from machinepool.controlplane import ControlPlane, WorkloadCluster
from machinepool.controlplane.process import Process, free_port
from machinepool.controlplane.register import register_workload_cluster
from machinepool.runtime.kube.client import Client

from .harness import wait_ready

CONTROLLERS = ("machinepool", "machinepool-machine", "kubeadmconfig", "sim-provider-pool")
RESULTS = {"success", "error", "requeue_after", "requeue"}


@pytest.fixture
def controllers(
    control_plane: ControlPlane, namespace: str, crds: list[str], tmp_path: Path
) -> Iterator[int]:
    """``machinepool run`` for core, bootstrap and Sim, confined to the test's namespace."""
    port = free_port()
    proc = Process(
        "controllers",
        [
            sys.executable,
            "-m",
            "machinepool",
            "run",
            f"--kubeconfig={control_plane.kubeconfig}",
            "--components=core,bootstrap,sim",
            f"--name=metrics-{uuid.uuid4().hex[:6]}",
            f"--namespace={namespace}",
            f"--leader-election-namespace={namespace}",
            f"--metrics-bind-address=127.0.0.1:{port}",
            "--insecure-diagnostics",  # the metric names are the point here; HTTPS is tested
        ],
        tmp_path,
    )
    proc.start()
    try:
        wait_ready(proc, port)
        yield port
    finally:
        proc.stop()


def scrape(port: int) -> dict[str, list[Sample]]:
    """Samples by name, through prometheus_client's parser (it raises on malformed text)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    samples: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def value(samples: dict[str, list[Sample]], metric: str, **labels: str) -> float:
    found = [s.value for s in samples.get(metric, []) if labels.items() <= s.labels.items()]
    assert found, f"no {metric} with {labels}"
    return sum(found)


async def test_metrics_carry_controller_runtime_names_and_labels(
    controllers: int, client: Client, namespace: str, workload: WorkloadCluster
) -> None:
    before = await asyncio.to_thread(scrape, controllers)
    for controller in CONTROLLERS:
        results = {
            s.labels["result"]
            for s in before["controller_runtime_reconcile_total"]
            if s.labels["controller"] == controller
        }
        assert results == RESULTS, controller
        for name in (
            "controller_runtime_reconcile_errors_total",
            "controller_runtime_terminal_reconcile_errors_total",
            "controller_runtime_active_workers",
            "controller_runtime_max_concurrent_reconciles",
            "controller_runtime_reconcile_time_seconds_count",
        ):
            series = [s for s in before[name] if s.labels == {"controller": controller}]
            assert len(series) == 1, (name, controller)
        queue = {"name": controller, "controller": controller}
        depth = [s for s in before["workqueue_depth"] if s.labels == {**queue, "priority": ""}]
        assert len(depth) == 1, controller
        for name in (
            "workqueue_adds_total",
            "workqueue_retries_total",
            "workqueue_queue_duration_seconds_count",
            "workqueue_work_duration_seconds_count",
        ):
            series = [s for s in before[name] if s.labels == queue]
            assert len(series) == 1, (name, controller)
        buckets = [
            s
            for s in before["controller_runtime_reconcile_time_seconds_bucket"]
            if s.labels["controller"] == controller
        ]
        assert buckets[-1].labels["le"] == "+Inf"

    # A pool to reconcile: the counters dashboards plot must move.
    await register_workload_cluster(client, "work", namespace, workload)
    await client.create(
        KUBEADM_CONFIGS,
        {"metadata": {"name": "p", "namespace": namespace}, "spec": {}},
        namespace,
    )
    after = before

    def moved(now: dict[str, list[Sample]]) -> bool:
        """Reconciled, and written: a config with no owner and no Cluster says why it waits
        once the adoption grace is over (its first write; it has no finalizer)."""
        reconciled = value(now, "controller_runtime_reconcile_total", controller="kubeadmconfig")
        requests = value(now, "rest_client_requests_total")
        return reconciled > 0 and requests > value(before, "rest_client_requests_total")

    async with asyncio.timeout(60):
        while not moved(after):
            await asyncio.sleep(0.2)
            after = await asyncio.to_thread(scrape, controllers)
    queue = {"controller": "kubeadmconfig"}
    assert value(after, "workqueue_adds_total", **queue) >= 1
    assert value(after, "workqueue_queue_duration_seconds_count", **queue) >= 1
    assert value(after, "workqueue_work_duration_seconds_count", **queue) >= 1
    assert (
        value(after, "controller_runtime_reconcile_time_seconds_count", controller="kubeadmconfig")
        >= 1
    )
    assert value(after, "rest_client_requests_total") > value(before, "rest_client_requests_total")
