"""Unit tests of bench/bench_write_floor.py's pure parts: the objects it writes and how it
knows every watch saw them."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_write_floor import (
    WATCHED,
    Tally,
    deleting_machine_status,
    record_for,
    section,
    sim_machine,
    user_data,
)
from mpbench.scenario import TO_VERSION, pool_objects

from machinepool.simworld.kubelet.joinconfig import parse_join
from machinepool.simworld.records import launch_entries, launch_secret, records_in

KUBEADM = next(
    body for _, body in pool_objects("pool-0000", 1, TO_VERSION) if body["kind"] == "KubeadmConfig"
)
POOL = {
    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
    "kind": "SimMachinePool",
    "metadata": {"name": "pool-00", "namespace": "bench", "uid": "1234567890"},
}


def test_records_get_distinct_addresses_and_round_trip_through_their_secret() -> None:
    taken: set[str] = set()
    records = [record_for(POOL, i, taken) for i in range(500)]
    assert len({r.private_ip for r in records}) == 500 == len(taken)
    entries = launch_entries(records[7], user_data(KUBEADM))
    secret = launch_secret(records[7], entries, labels={}, owner={})
    (back,) = records_in(secret)
    assert back.provider_id == records[7].provider_id
    assert back.hostname == records[7].hostname


def test_user_data_is_the_scenarios_join_the_node_simulator_reads_to_the_nodes_name() -> None:
    record = record_for(POOL, 0, set())
    join = parse_join(user_data(KUBEADM))
    assert join.node_name(record.hostname, record.meta_data()) == record.hostname


def test_sim_machine_is_owned_by_its_pool_and_names_its_instance() -> None:
    record = record_for(POOL, 3, set())
    body = sim_machine(record, POOL)
    assert body["metadata"]["ownerReferences"][0]["uid"] == "1234567890"
    assert body["spec"]["providerID"] == record.provider_id
    assert body["metadata"]["finalizers"]


def test_deleting_status_marks_the_machine_deleting() -> None:
    status = deleting_machine_status()["status"]
    assert status["phase"] == "Deleting"
    deleting = [c for c in status["conditions"] if c["type"] == "Deleting"]
    assert [c["status"] for c in deleting] == ["True"]


def test_tally_is_done_only_while_every_kind_saw_what_it_expects() -> None:
    async def scenario() -> None:
        tally = Tally()
        tally.expect({"nodes": 2, "machines": 1})
        assert not tally.done.is_set()
        tally.add("nodes")
        tally.add("machines")
        assert not tally.done.is_set()
        tally.add("nodes")
        assert tally.done.is_set()
        tally.expect({"nodes": 1})  # a new phase: one more change to see
        assert not tally.done.is_set()
        tally.add("nodes")
        assert tally.done.is_set()

    asyncio.run(scenario())


def test_section_states_each_phase_against_its_goal() -> None:
    def phase(nodes: int, seconds: float, mgmt: float) -> dict[str, object]:
        return {
            "nodes": nodes,
            "seconds": seconds,
            "written_seconds": seconds,
            "writes": 7 * nodes,
            "by_resource": {"bench-core patch machines": nodes},
            "cpu": {"mgmt_apiserver": mgmt, "workload_apiserver": 10.0, "etcd": 10.0},
            "client_cpu": 5.0,
        }

    found = {
        "nodes": 1000,
        "pools": 10,
        "concurrency": 64,
        "watch": True,
        "cores": 2,
        "phases": {"create": phase(1000, 14.0, 20.0), "replace": phase(1000, 30.0, 40.0)},
    }
    text = section(found)
    assert "| figure | create N Nodes | replace each of them |" in text
    # (20 + 10 + 10) / 2 cores = 20 s for 1,000 Nodes; 200 s scaled to 10,000.
    assert "| least wall time on 2 cores: apiservers and etcd CPU / 2, s | 20.0 | 30.0 |" in text
    assert "| the same for 10,000 Nodes (scaled), s | 200.0 | 300.0 |" in text
    assert "120 s for 10,000" in text
    assert "300 s for 10,000" in text
    assert {res.plural for _, res, _, _ in WATCHED} == {
        "secrets",
        "simmachines",
        "machines",
        "nodes",
    }
