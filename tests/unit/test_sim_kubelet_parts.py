"""Node simulator pure parts: reading the JoinConfiguration, Node and pod status builders,
and the instance record's clock-driven state."""

from __future__ import annotations

import base64
import gzip
from datetime import UTC, datetime, timedelta

import pytest

from machinepool.api import constants as c
from machinepool.sim.kubelet import InvalidBootstrapData, parse_join
from machinepool.sim.kubelet.node import node_object, node_status
from machinepool.sim.records import InstanceRecord

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
    node = node_object(r, [], {"role": "worker"})
    assert node["spec"]["providerID"] == r.provider_id
    assert node["spec"]["taints"] == [
        {"key": c.UNINITIALIZED_TAINT_KEY, "effect": c.UNINITIALIZED_TAINT_EFFECT}
    ]
    assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] == "zone-a"
    status = node_status(r, True, r.boot_at)["status"]
    assert status["nodeInfo"]["kubeletVersion"] == "v1.34.0"
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    # A kubelet reports the pressure conditions beside Ready; upstream's Machine NodeHealthy
    # is Unknown without them.
    assert conditions == {
        "Ready": "True",
        "MemoryPressure": "False",
        "DiskPressure": "False",
        "PIDPressure": "False",
    }
    unready = node_status(r, False, r.boot_at)["status"]["conditions"]
    assert {c["type"]: c["status"] for c in unready}["Ready"] == "False"
