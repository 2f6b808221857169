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
