"""Node simulator pure parts: reading the JoinConfiguration, Node and pod status builders,
and the instance record's clock-driven state."""

from __future__ import annotations

import base64
import gzip
from datetime import UTC, datetime, timedelta

import pytest

from machinepool.api import constants as c
from machinepool.simworld.kubelet import InvalidBootstrapData, parse_join
from machinepool.simworld.kubelet.node import (
    STOP_SECONDS_ANNOTATION,
    lease_age,
    node_lease,
    node_lease_renewal,
    node_object,
    node_status,
    pod_stopped_status,
    pod_stops_at,
)
from machinepool.simworld.records import InstanceRecord

JOIN = """apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    token: abcdef.0123456789abcdef
    apiServerEndpoint: 127.0.0.1:6443
    caCertHashes: [sha256:00ff]
nodeRegistration:
  taints:
  - {key: node.cluster.x-k8s.io/uninitialized, effect: NoSchedule}
  kubeletExtraArgs:
  - {name: node-labels, value: "role=worker,tier=a"}
"""


def cloud_config(content: str, encoding: str = "") -> bytes:
    entry = "- path: /run/kubeadm/kubeadm-join-config.yaml\n"
    if encoding:
        entry += f"  encoding: {encoding}\n"
    indented = "\n".join("    " + line for line in content.splitlines())
    entry += "  content: |\n" + indented + "\n"
    return ("## template: jinja\n#cloud-config\nwrite_files:\n" + entry).encode()


def test_parses_token_endpoint_pins_taints_and_labels() -> None:
    info = parse_join(cloud_config(JOIN))
    assert info.token == "abcdef.0123456789abcdef"
    assert info.token_id == "abcdef"
    assert info.api_server_endpoint == "127.0.0.1:6443"
    assert info.ca_cert_hashes == ("sha256:00ff",)
    assert info.node_labels == {"role": "worker", "tier": "a"}
    assert info.taints[0]["key"] == c.UNINITIALIZED_TAINT_KEY
    assert "0123456789abcdef" not in repr(info)  # the secret half never prints


def test_parses_gzip_base64_content() -> None:
    packed = base64.b64encode(gzip.compress(JOIN.encode())).decode()
    assert parse_join(cloud_config(packed, "gzip+base64")).token_id == "abcdef"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{{{", "not a YAML"),
        (b"#cloud-config\nruncmd: [ls]\n", "no write_files entry"),
        (cloud_config(JOIN.replace("token: abcdef.0123456789abcdef", "")), "no discovery"),
    ],
)
def test_unusable_bootstrap_data_says_why(data: bytes, message: str) -> None:
    with pytest.raises(InvalidBootstrapData, match=message):
        parse_join(data)


def record(**kw: object) -> InstanceRecord:
    now = datetime(2025, 1, 1, tzinfo=UTC)
    base: dict[str, object] = {
        "namespace": "ns",
        "id": "pool-abcde-1",
        "pool": "pool",
        "index": 1,
        "cluster": "work",
        "failure_domain": "zone-a",
        "provider_id": "sim:///zone-a/pool-abcde-1",
        "template_hash": "h",
        "version": "v1.34.0",
        "created": now,
        "boot_at": now + timedelta(seconds=5),
        "will_fail": False,
        "bootstrap_version": "data@1",
        "forced_state": "",
        "attributes": {"instanceType": "sim.small"},
        "private_ip": "10.0.1.23",
        "hostname": "ip-10-0-1-23.sim.internal",
    }
    base.update(kw)
    return InstanceRecord(**base)  # type: ignore[arg-type]


def test_state_follows_the_boot_clock_and_forced_states() -> None:
    r = record()
    assert r.state_at(r.created) == "pending"
    assert r.state_at(r.boot_at) == "running"
    assert record(will_fail=True).state_at(r.boot_at) == "failed"
    assert record(forced_state="terminated").state_at(r.created) == "terminated"
    assert record(forced_state="failed").state_at(r.boot_at) == "failed"


def test_node_registers_provider_id_taint_and_version() -> None:
    r = record()
    node = node_object(r, "ip-10-0-1-23.sim.internal", [], {"role": "worker"})
    assert node["metadata"]["name"] == "ip-10-0-1-23.sim.internal"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "ip-10-0-1-23.sim.internal"
    assert node["spec"]["providerID"] == r.provider_id
    assert node["spec"]["taints"] == [
        {"key": c.UNINITIALIZED_TAINT_KEY, "effect": c.UNINITIALIZED_TAINT_EFFECT}
    ]
    assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] == "zone-a"
    status = node_status(r, "ip-10-0-1-23.sim.internal", True, r.boot_at)["status"]
    assert status["nodeInfo"]["kubeletVersion"] == "v1.34.0"
    assert status["addresses"] == [
        {"type": "InternalIP", "address": "10.0.1.23"},
        {"type": "Hostname", "address": "ip-10-0-1-23.sim.internal"},
    ]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    # A kubelet reports the pressure conditions beside Ready; upstream's Machine NodeHealthy
    # is Unknown without them.
    assert conditions == {
        "Ready": "True",
        "MemoryPressure": "False",
        "DiskPressure": "False",
        "PIDPressure": "False",
    }
    unready = node_status(r, "n", False, r.boot_at)["status"]["conditions"]
    assert {c["type"]: c["status"] for c in unready}["Ready"] == "False"


def test_a_heartbeat_moves_the_heartbeat_time_and_no_transition() -> None:
    """A kubelet's status heartbeat keeps each unchanged condition's lastTransitionTime, so
    the core's Node watches, which count Ready transitions, are not woken by it."""
    from machinepool.controllers.common import node_inputs

    r = record()
    joined = {"metadata": {"uid": "u"}, "spec": {"providerID": r.provider_id}}
    joined.update(node_status(r, "n", True, r.boot_at))
    later = r.boot_at + timedelta(minutes=5)
    beat = {**joined, **node_status(r, "n", True, later, current=joined)}
    ready = {c["type"]: c for c in beat["status"]["conditions"]}["Ready"]
    assert ready["lastHeartbeatTime"] != ready["lastTransitionTime"]
    assert node_inputs(beat) == node_inputs(joined)
    broken = {**joined, **node_status(r, "n", False, later, current=joined)}
    assert node_inputs(broken) != node_inputs(joined), "a real transition still counts"


def named(name: str, header: str = "## template: jinja\n") -> bytes:
    """Bootstrap data whose JoinConfiguration sets nodeRegistration.name to ``name``."""
    join = JOIN.replace("nodeRegistration:\n", f"nodeRegistration:\n  name: '{name}'\n")
    return header.encode() + cloud_config(join).split(b"\n", 1)[1]


HOSTNAME = "ip-10-0-1-23.sim.internal"


@pytest.mark.parametrize(
    "template",
    [
        '{{ ds.meta_data["local_hostname"] }}',  # ours (the demo, the bench) and CAPZ's
        "{{ ds.meta_data.local_hostname }}",  # CAPA's
        "{{ local_hostname }}",  # CAPV's and CAPO's
        "{{v1.local_hostname}}",
    ],
)
def test_a_templated_node_name_is_rendered_from_the_instance_metadata(template: str) -> None:
    r = record(hostname="ip-10-0-9-9.sim.internal")
    info = parse_join(named(template))
    assert info.node_name(r.hostname, r.meta_data()) == "ip-10-0-9-9.sim.internal"


def test_the_node_is_named_after_the_hostname_unless_the_join_names_it() -> None:
    r = record()
    assert parse_join(cloud_config(JOIN)).node_name(r.hostname, r.meta_data()) == HOSTNAME
    assert parse_join(named("worker-1")).node_name(r.hostname, r.meta_data()) == "worker-1"
    ided = parse_join(named("w-{{ ds.meta_data.instance_id }}"))
    assert ided.node_name(r.hostname, r.meta_data()) == "w-pool-abcde-1"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # cloud-init renders nothing without the header: the braces stay, kubeadm refuses them
        (named("{{ ds.meta_data.local_hostname }}", header=""), "not a valid Node name"),
        (named("{{ ds.meta_data.no_such_key }}"), "has no 'no_such_key'"),
        (named("{{ ds.meta_data.local_hostname | upper }}"), "variable look-ups only"),
        (named("Worker_1"), "not a valid Node name"),
    ],
)
def test_a_node_name_that_cannot_be_rendered_or_used_is_refused(data: bytes, message: str) -> None:
    r = record()
    with pytest.raises(InvalidBootstrapData, match=message):
        parse_join(data).node_name(r.hostname, r.meta_data())


def test_a_node_lease_is_held_and_owned_by_its_node_and_ages_from_its_renewal() -> None:
    node = {"metadata": {"name": HOSTNAME, "uid": "u-7"}}
    now = datetime(2025, 1, 1, 0, 0, 0, 250000, tzinfo=UTC)
    lease = node_lease(node, now, 40)
    assert lease["metadata"]["namespace"] == "kube-node-lease"
    assert lease["metadata"]["name"] == HOSTNAME
    assert lease["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": HOSTNAME, "uid": "u-7"}
    ]
    assert lease["spec"] == {
        "holderIdentity": HOSTNAME,
        "leaseDurationSeconds": 40,
        "renewTime": "2025-01-01T00:00:00.250000Z",
    }
    assert node_lease_renewal(HOSTNAME, now, 40)["spec"] == lease["spec"]
    assert lease_age(lease, now + timedelta(seconds=3)) == pytest.approx(3.0)
    assert lease_age(None, now) == float("inf")


def _deleted_pod(grace: int, stop_seconds: str | None) -> dict[str, object]:
    deleted_at = datetime(2026, 1, 1, tzinfo=UTC)
    annotations = {} if stop_seconds is None else {STOP_SECONDS_ANNOTATION: stop_seconds}
    return {
        "metadata": {
            "name": "web",
            "annotations": annotations,
            "deletionTimestamp": (deleted_at + timedelta(seconds=grace)).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
            "deletionGracePeriodSeconds": grace,
        },
        "spec": {"containers": [{"name": "app", "image": "app:1"}]},
    }


def test_a_pod_without_a_stop_time_exits_when_asked() -> None:
    asked = datetime(2026, 1, 1, tzinfo=UTC)
    assert pod_stops_at(_deleted_pod(30, None)) == (asked, False)


def test_a_pod_stops_after_its_stop_time_within_its_grace_period() -> None:
    asked = datetime(2026, 1, 1, tzinfo=UTC)
    assert pod_stops_at(_deleted_pod(30, "5")) == (asked + timedelta(seconds=5), False)


def test_a_pod_that_outlasts_its_grace_period_is_killed_at_its_end() -> None:
    asked = datetime(2026, 1, 1, tzinfo=UTC)
    assert pod_stops_at(_deleted_pod(10, "600")) == (asked + timedelta(seconds=10), True)
    assert pod_stops_at(_deleted_pod(0, "5")) == (asked, True)


def test_a_pod_not_being_deleted_has_no_stop() -> None:
    pod = _deleted_pod(30, "5")
    del pod["metadata"]["deletionTimestamp"]  # type: ignore[attr-defined]
    assert pod_stops_at(pod) is None


def test_stopped_status_reports_sigkill_for_a_killed_pod() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    killed = pod_stopped_status(_deleted_pod(10, "600"), now, killed=True)["status"]
    exited = pod_stopped_status(_deleted_pod(10, "1"), now, killed=False)["status"]
    assert killed["phase"] == "Failed"
    assert killed["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    assert exited["phase"] == "Succeeded"
    assert exited["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
