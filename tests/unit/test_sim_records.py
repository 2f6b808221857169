"""The simulated cloud's record format: what the sim backend writes is what the node simulator
and ``SimCloud`` read back, and the cloud's state names are the pool engine's."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import machinepool.providers.sim as sim_provider
import machinepool.sim as sim
from machinepool.api import constants as c
from machinepool.providers.pool.types import InstanceState
from machinepool.sim import records as r

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
OWNER = {"apiVersion": "v", "kind": "SimMachinePool", "name": "pool", "uid": "u-1"}


def record() -> r.InstanceRecord:
    return r.InstanceRecord(
        namespace="ns",
        id="pool-abcde-3",
        pool="pool",
        index=3,
        cluster="work",
        failure_domain="zone-b",
        provider_id=r.provider_id("zone-b", "pool-abcde-3"),
        template_hash="h1",
        version="v1.34.4",
        created=NOW,
        boot_at=NOW + timedelta(seconds=5),
        will_fail=False,
        bootstrap_version="7",
        forced_state="",
        attributes={"instanceType": "sim.small"},
        private_ip="10.0.1.23",
        hostname="ip-10-0-1-23.sim.internal",
    )


def test_a_written_record_reads_back_whole() -> None:
    secret = r.instance_secret(
        record(), userdata=b"#cloud-config", labels={"extra": "yes"}, owner=OWNER
    )
    assert secret["type"] == r.INSTANCE_SECRET_TYPE
    meta = secret["metadata"]
    assert (meta["name"], meta["namespace"]) == ("pool-abcde-3", "ns")
    assert meta["labels"] == {
        r.INSTANCE_LABEL: "true",
        r.POOL_LABEL: c.pool_name_label_value("pool"),
        c.CLUSTER_NAME_LABEL: "work",
        "extra": "yes",
    }
    assert meta["ownerReferences"] == [OWNER]
    assert meta["annotations"][r.ADDRESS_ANNOTATION] == "10.0.1.23"
    assert r.InstanceRecord.from_secret(secret) == record()
    assert r.user_data(secret) == b"#cloud-config"


def test_forced_state_and_kubelet_fault_come_from_annotations() -> None:
    secret = r.instance_secret(record(), userdata=b"", labels={}, owner=OWNER)
    secret["metadata"]["annotations"] |= {
        r.STATE_ANNOTATION: r.TERMINATED,
        r.KUBELET_ANNOTATION: "stopped",
    }
    read = r.InstanceRecord.from_secret(secret)
    assert read.state_at(NOW) == r.TERMINATED
    assert read.kubelet_stopped


def test_an_instance_that_fails_after_boot_runs_until_its_time() -> None:
    breaks = NOW + timedelta(seconds=60)
    secret = r.instance_secret(
        dataclasses.replace(record(), fail_at=breaks), userdata=b"", labels={}, owner=OWNER
    )
    read = r.InstanceRecord.from_secret(secret)
    assert read.fail_at == breaks
    assert read.state_at(NOW) == r.PENDING
    assert read.state_at(NOW + timedelta(seconds=30)) == r.RUNNING
    assert read.state_at(breaks) == r.FAILED
    assert (
        r.InstanceRecord.from_secret(
            r.instance_secret(record(), userdata=b"", labels={}, owner=OWNER)
        ).state_at(breaks + timedelta(days=1))
        == r.RUNNING
    )


def test_cloud_states_are_the_engine_instance_states() -> None:
    """The sim backend maps a record's state onto ``InstanceState`` by value."""
    cloud = {r.PENDING, r.RUNNING, r.FAILED, r.TERMINATED}
    assert cloud == {state.value for state in InstanceState}


def test_the_sim_provider_exports_only_its_controller_side() -> None:
    """The cloud is ``machinepool.sim``'s; the provider package re-exports none of it."""
    assert set(sim_provider.__all__) == {
        "SimBackend",
        "SimOptions",
        "SimPoolSettings",
        "SimProvider",
        "setup",
    }
    assert {"SimCloud", "Faults", "FaultsWatch", "InstanceRecord"} <= set(sim.__all__)
    assert all(hasattr(sim, name) for name in sim.__all__)


def test_a_record_from_before_hostnames_reads_back_named_as_its_nodes_were() -> None:
    """Records written before the cloud allocated addresses have none; their Nodes were
    named after the instance id, which is what their hostname reads back as."""
    old = dataclasses.replace(record(), private_ip="", hostname="")
    read = r.InstanceRecord.from_secret(
        r.instance_secret(old, userdata=b"", labels={}, owner=OWNER)
    )
    assert (read.private_ip, read.hostname) == ("", "pool-abcde-3")


def test_an_address_is_stable_for_an_instance_and_never_one_in_use() -> None:
    first = r.allocate_address("ns", "pool-abcde-3", lambda _ip: False)
    assert first == r.allocate_address("ns", "pool-abcde-3", lambda _ip: False)
    assert first.startswith("10.")
    assert r.hostname_of(first) == f"ip-{first.replace('.', '-')}.sim.internal"
    used = {first}
    second = r.allocate_address("ns", "pool-abcde-3", used.__contains__)
    assert second != first
    asked: list[str] = []

    def busy_for_a_while(ip: str) -> bool:
        asked.append(ip)
        return len(asked) < 300  # 300 candidates in a row cross a .255/.0 boundary

    chosen = r.allocate_address("ns", "pool-abcde-3", busy_for_a_while)
    assert chosen == asked[-1]
    assert not [ip for ip in asked if ip.endswith((".0", ".255"))]


def test_the_metadata_service_answers_what_cloud_init_templates_ask() -> None:
    meta = record().meta_data()
    assert meta["local_hostname"] == "ip-10-0-1-23.sim.internal"
    assert meta["instance_id"] == "pool-abcde-3"
    assert meta["local_ipv4"] == "10.0.1.23"
    assert meta["availability_zone"] == "zone-b"
