"""The simulated cloud's record format: what the sim backend writes is what the node simulator
and ``SimCloud`` read back, and the cloud's state names are the pool engine's."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import machinepool.providers.sim as sim_provider
import machinepool.simworld as sim
from machinepool.api import constants as c
from machinepool.providers.pool.types import InstanceState
from machinepool.simworld import records as r

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


def launch(*records: r.InstanceRecord, userdata: bytes = b"") -> dict[str, Any]:
    entries: dict[str, str] = {}
    for one in records:
        entries |= r.launch_entries(one, userdata)
    secret = r.launch_secret(records[0], entries, labels={}, owner=OWNER)
    secret["metadata"]["uid"] = "u-launch"
    return secret


def test_a_written_record_reads_back_whole() -> None:
    entries = r.launch_entries(record(), b"#cloud-config")
    secret = r.launch_secret(record(), entries, labels={"extra": "yes"}, owner=OWNER)
    assert secret["type"] == r.INSTANCE_SECRET_TYPE
    meta = secret["metadata"]
    assert (meta["name"], meta["namespace"]) == ("pool-abcde-launch-0", "ns")
    assert meta["labels"] == {
        r.INSTANCE_LABEL: "true",
        r.POOL_LABEL: c.pool_name_label_value("pool"),
        c.CLUSTER_NAME_LABEL: "work",
        "extra": "yes",
    }
    assert meta["ownerReferences"] == [OWNER]
    (read,) = r.records_in(secret)
    assert read.launch == "pool-abcde-launch-0"
    assert dataclasses.replace(read, launch="", userdata="") == record()
    assert r.user_data(secret, read) == b"#cloud-config"


def test_a_launch_holds_its_blocks_instances_and_one_copy_of_shared_userdata() -> None:
    """Instances of one block of ordinals share a launch; those that booted with the same
    data share its copy; the next block is another launch."""
    a, b = record(), dataclasses.replace(record(), id="pool-abcde-4", index=4)
    later = dataclasses.replace(record(), id="pool-abcde-9", index=9)
    secret = launch(a, b, userdata=b"#one")
    secret["data"] |= r.launch_entries(later, b"#two")
    read = r.records_in(secret)
    assert [x.id for x in read] == ["pool-abcde-3", "pool-abcde-4", "pool-abcde-9"]
    assert sorted(r.instance_ids(secret)) == ["pool-abcde-3", "pool-abcde-4", "pool-abcde-9"]
    assert len([k for k in secret["data"] if k.startswith("userdata.")]) == 2
    assert [r.user_data(secret, x) for x in read] == [b"#one", b"#one", b"#two"]
    size = r.LAUNCH_SIZE
    next_block = dataclasses.replace(record(), id=f"pool-abcde-{size}", index=size)
    assert r.launch_name(next_block) == "pool-abcde-launch-1"
    assert r.launch_name(dataclasses.replace(next_block, index=size - 1)) != "pool-abcde-launch-0"


def test_patches_touch_only_their_instance() -> None:
    a, b = record(), dataclasses.replace(record(), id="pool-abcde-4", index=4)
    secret = launch(a, b)
    (read_a, read_b) = r.records_in(secret)
    for patch in (
        r.state_patch(read_a, r.TERMINATED, "OutOfBand"),
        r.kubelet_patch(read_b, stopped=True),
    ):
        secret["data"] |= patch["data"]
    read_a, read_b = r.records_in(secret)
    assert [r.record_in(secret, x.id) for x in (read_a, read_b)] == [read_a, read_b]
    assert r.record_in(secret, "pool-abcde-5") is None
    assert (read_a.state_at(NOW), read_a.kubelet_stopped) == (r.TERMINATED, False)
    assert (read_b.state_at(NOW + timedelta(seconds=10)), read_b.kubelet_stopped) == (
        r.RUNNING,
        True,
    )
    before = r.instance_entries(secret, "pool-abcde-4")
    secret["data"] = {
        k: v for k, v in (secret["data"] | r.removal_patch(read_a)["data"]).items() if v
    }
    assert r.instance_ids(secret) == ["pool-abcde-4"]
    assert r.instance_entries(secret, "pool-abcde-4") == before


def test_a_record_of_the_one_instance_format_reads_back_and_is_patched_in_it() -> None:
    """Secrets written by earlier versions, one per instance, read back as launches of one."""
    info = r._b64(json.dumps(record().info()).encode())
    legacy = {
        "metadata": {
            "name": "pool-abcde-3",
            "namespace": "ns",
            "uid": "u-old",
            "annotations": {r.POOL_ANNOTATION: "pool", r.KUBELET_ANNOTATION: "stopped"},
        },
        "data": {"instance.json": info, "userdata": r._b64(b"#old")},
    }
    (read,) = r.records_in(legacy)
    assert (r.record_in(legacy, "pool-abcde-3"), r.record_in(legacy, "pool-abcde-4")) == (
        read,
        None,
    )
    assert (read.id, read.launch, read.legacy, read.kubelet_stopped) == (
        "pool-abcde-3",
        "pool-abcde-3",
        True,
        True,
    )
    assert r.user_data(legacy, read) == b"#old"
    assert r.state_patch(read, r.FAILED, "Injected") == {
        "metadata": {
            "annotations": {r.STATE_ANNOTATION: r.FAILED, r.STATE_REASON_ANNOTATION: "Injected"}
        }
    }


def test_an_instance_that_fails_after_boot_runs_until_its_time() -> None:
    breaks = NOW + timedelta(seconds=60)
    (read,) = r.records_in(launch(dataclasses.replace(record(), fail_at=breaks)))
    assert read.fail_at == breaks
    assert read.state_at(NOW) == r.PENDING
    assert read.state_at(NOW + timedelta(seconds=30)) == r.RUNNING
    assert read.state_at(breaks) == r.FAILED
    assert r.records_in(launch(record()))[0].state_at(breaks + timedelta(days=1)) == r.RUNNING


def test_a_warm_instance_boots_stops_and_runs_once_started_with_new_userdata() -> None:
    warm = dataclasses.replace(record(), warm=True)
    secret = launch(warm, userdata=b"old token")
    (read,) = r.records_in(secret)
    assert read.warm
    assert read.start_at is None
    assert read.state_at(NOW) == r.PENDING
    assert read.state_at(NOW + timedelta(days=1)) == r.STOPPED
    started = NOW + timedelta(minutes=10)
    patch = r.start_patch(read, started + timedelta(seconds=3), b"new token", "8")
    secret["data"] |= patch["data"]
    (read,) = r.records_in(secret)
    assert read.running_at == started + timedelta(seconds=3)
    assert read.state_at(started) == r.PENDING
    assert read.state_at(started + timedelta(seconds=3)) == r.RUNNING
    assert (read.bootstrap_version, r.user_data(secret, read)) == ("8", b"new token")


def test_cloud_states_are_the_engine_instance_states() -> None:
    """The sim backend maps a record's state onto ``InstanceState`` by value."""
    cloud = {r.PENDING, r.RUNNING, r.STOPPED, r.FAILED, r.TERMINATED}
    assert cloud == {state.value for state in InstanceState}


def test_the_sim_provider_exports_only_its_controller_side() -> None:
    """The cloud is ``machinepool.simworld``'s; the provider package re-exports none of it."""
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
    (read,) = r.records_in(launch(old))
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
