"""Pure cloud-config rendering: user content and templated names pass through unchanged."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from machinepool.api.bootstrap_v1beta2 import File, JoinConfiguration, KubeadmConfigSpec, User
from machinepool.bootstrap.kubeadm.cloudinit import (
    JOIN_CONFIG_PATH,
    InvalidBootstrapInput,
    NodeInput,
    dump_yaml,
    join_configuration_document,
    kubeadm_api_version,
    render_node_cloud_config,
)

JINJA_NAME = '{{ ds.meta_data["local_hostname"] }}'


def _join(**discovery: Any) -> JoinConfiguration:
    return JoinConfiguration.from_dict(
        {
            "nodeRegistration": {
                "name": JINJA_NAME,
                "criSocket": "unix:///run/containerd/containerd.sock",
                "kubeletExtraArgs": [{"name": "node-labels", "value": "pool=a,tier=b"}],
                "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
            },
            "discovery": {
                "bootstrapToken": {
                    "token": "abcdef.0123456789abcdef",
                    "apiServerEndpoint": "10.0.0.1:6443",
                    "caCertHashes": ["sha256:" + "ab" * 32],
                    **discovery,
                }
            },
        }
    )


def _parse(text: str) -> dict[str, Any]:
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict)
    return doc


def _file(doc: dict[str, Any], path: str) -> dict[str, Any]:
    return next(f for f in doc["write_files"] if f["path"] == path)


def test_starts_with_the_jinja_and_cloud_config_headers() -> None:
    text = render_node_cloud_config(NodeInput(_join()))
    assert text.startswith("## template: jinja\n#cloud-config\n")


def test_join_configuration_is_kubeadm_v1beta4_with_discovery_and_registration() -> None:
    doc = _parse(render_node_cloud_config(NodeInput(_join())))
    join = yaml.safe_load(_file(doc, JOIN_CONFIG_PATH)["content"])
    assert join["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert join["kind"] == "JoinConfiguration"
    token = join["discovery"]["bootstrapToken"]
    assert token == {
        "token": "abcdef.0123456789abcdef",
        "apiServerEndpoint": "10.0.0.1:6443",
        "caCertHashes": ["sha256:" + "ab" * 32],
    }
    registration = join["nodeRegistration"]
    assert registration["name"] == JINJA_NAME
    assert registration["criSocket"] == "unix:///run/containerd/containerd.sock"
    assert registration["kubeletExtraArgs"] == [{"name": "node-labels", "value": "pool=a,tier=b"}]
    assert registration["taints"] == [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
        {"key": "node.cluster.x-k8s.io/uninitialized", "effect": "NoSchedule"},
    ]


def test_the_templated_node_name_is_written_verbatim_in_the_text() -> None:
    # cloud-init renders Jinja on the raw text, so the expression must appear as written.
    text = render_node_cloud_config(NodeInput(_join()))
    assert JINJA_NAME in text


CONTENTS = [
    "plain",
    "line one\nline two\n",
    "no trailing newline\nsecond",
    "  leading spaces\n\tand a tab\n",
    "trailing spaces   \nnext\n",
    json.dumps({"a": [1, 2, {"b": "c: d"}], "e": "#not a comment"}, indent=2) + "\n",
    "x" * 5000,
    "- looks: like yaml\n? key\n: value\n",
    "ends with blank lines\n\n\n",
    "unicode: é ü 中文 \U0001f600\n",
    "{{ ds.meta_data.instance_id }}\n",
    "'quotes' and \"doubles\" and \\ backslashes\n",
]


@pytest.mark.parametrize("content", CONTENTS)
def test_file_content_passes_through_byte_for_byte(content: str) -> None:
    item = File(path="/etc/example", owner="root:root", permissions="0644", content=content)
    doc = _parse(render_node_cloud_config(NodeInput(_join(), files=[item])))
    written = _file(doc, "/etc/example")
    assert written["content"] == content
    assert written["owner"] == "root:root"
    assert written["permissions"] == "0644"


def test_multi_line_content_is_a_block_scalar() -> None:
    item = File(path="/etc/a", content="first\nsecond\n")
    text = render_node_cloud_config(NodeInput(_join(), files=[item]))
    assert "content: |\n" in text
    assert "      first\n      second\n" in text


def test_encoding_and_append_are_kept() -> None:
    item = File(path="/etc/b", encoding="gzip+base64", append=True, content="H4sIAAAA")
    written = _file(_parse(render_node_cloud_config(NodeInput(_join(), files=[item]))), "/etc/b")
    assert written == {
        "path": "/etc/b",
        "encoding": "gzip+base64",
        "append": True,
        "content": "H4sIAAAA",
    }


@pytest.mark.parametrize("mode", ["rw-r--r--", "0x1a4", "08", "0999", "12345"])
def test_invalid_permissions_name_the_field_and_the_fix(mode: str) -> None:
    item = File(path="/etc/c", permissions=mode, content="x")
    with pytest.raises(InvalidBootstrapInput) as info:
        render_node_cloud_config(NodeInput(_join(), files=[item]))
    message = str(info.value)
    assert "spec.files[0]" in message
    assert '"0644"' in message


def test_three_digit_permissions_are_accepted() -> None:
    item = File(path="/etc/c", permissions="644", content="x")
    doc = _parse(render_node_cloud_config(NodeInput(_join(), files=[item])))
    assert _file(doc, "/etc/c")["permissions"] == "644"


def test_relative_path_is_rejected() -> None:
    with pytest.raises(InvalidBootstrapInput, match="must be absolute"):
        render_node_cloud_config(NodeInput(_join(), files=[File(path="etc/x", content="x")]))


def test_commands_run_around_the_join_in_order() -> None:
    doc = _parse(
        render_node_cloud_config(
            NodeInput(
                _join(),
                pre_kubeadm_commands=[
                    "echo pre",
                    "hostnamectl set-hostname {{ v1.local_hostname }}",
                ],
                post_kubeadm_commands=["echo post"],
                boot_commands=["echo boot"],
                verbosity=5,
            )
        )
    )
    runcmd = doc["runcmd"]
    assert runcmd[:2] == ["echo pre", "hostnamectl set-hostname {{ v1.local_hostname }}"]
    assert runcmd[2].startswith(f"kubeadm join --config {JOIN_CONFIG_PATH} --v 5 && ")
    assert runcmd[3] == "echo post"
    assert doc["bootcmd"] == ["echo boot"]


def test_users_use_cloud_init_spellings() -> None:
    user = User(
        name="ops",
        home_dir="/home/ops",
        lock_password=False,
        primary_group="ops",
        ssh_authorized_keys=["ssh-ed25519 AAAA ops@example"],
        sudo="ALL=(ALL) NOPASSWD:ALL",
    )
    doc = _parse(render_node_cloud_config(NodeInput(_join(), users=[user])))
    assert doc["users"] == [
        {
            "name": "ops",
            "homedir": "/home/ops",
            "lock_passwd": False,
            "primary_group": "ops",
            "ssh_authorized_keys": ["ssh-ed25519 AAAA ops@example"],
            "sudo": "ALL=(ALL) NOPASSWD:ALL",
        }
    ]


def test_ntp_mounts_and_disk_setup() -> None:
    spec = KubeadmConfigSpec.from_dict(
        {
            "ntp": {"enabled": True, "servers": ["time.example"]},
            "mounts": [["/dev/sdb1", "/data"]],
            "diskSetup": {
                "partitions": [{"device": "/dev/sdb", "layout": True, "tableType": "gpt"}],
                "filesystems": [{"device": "/dev/sdb1", "filesystem": "ext4", "label": "data"}],
            },
        }
    )
    node = NodeInput(_join(), ntp=spec.ntp, mounts=spec.mounts or (), disk_setup=spec.disk_setup)
    doc = _parse(render_node_cloud_config(node))
    assert doc["ntp"] == {"enabled": True, "servers": ["time.example"]}
    assert doc["mounts"] == [["/dev/sdb1", "/data"]]
    assert doc["disk_setup"] == {"/dev/sdb": {"table_type": "gpt", "layout": True}}
    assert doc["fs_setup"] == [{"label": "data", "filesystem": "ext4", "device": "/dev/sdb1"}]


def test_timeouts_become_kubeadm_durations() -> None:
    join = _join().model_copy(
        update={
            "timeouts": JoinConfiguration.from_dict(
                {"timeouts": {"discoverySeconds": 300, "tlsBootstrapSeconds": 60}}
            ).timeouts
        }
    )
    doc = _parse(render_node_cloud_config(NodeInput(join)))
    rendered = yaml.safe_load(_file(doc, JOIN_CONFIG_PATH)["content"])
    assert rendered["timeouts"] == {"discovery": "300s", "tlsBootstrap": "60s"}


def test_rendering_is_deterministic_and_does_not_modify_the_input() -> None:
    join = _join()
    before = join.to_dict()
    first = render_node_cloud_config(NodeInput(join, files=[File(path="/a", content="x\n")]))
    second = render_node_cloud_config(NodeInput(join, files=[File(path="/a", content="x\n")]))
    assert first == second
    assert join.to_dict() == before


def test_dump_yaml_never_folds_long_lines() -> None:
    long = "word " * 400
    text = dump_yaml({"k": long})
    assert len(text.splitlines()) == 1
    assert yaml.safe_load(text) == {"k": long}


def test_the_kubeadm_api_follows_the_kubernetes_version() -> None:
    assert kubeadm_api_version("v1.30.4") == "kubeadm.k8s.io/v1beta3"
    assert kubeadm_api_version("v1.22.0") == "kubeadm.k8s.io/v1beta3"
    assert kubeadm_api_version("v1.31.0") == "kubeadm.k8s.io/v1beta4"
    assert kubeadm_api_version("") == "kubeadm.k8s.io/v1beta4"
    with pytest.raises(InvalidBootstrapInput, match=r"older than v1\.22"):
        kubeadm_api_version("v1.21.9")


def test_a_v1beta3_join_spells_kubelet_args_as_a_map() -> None:
    join = JoinConfiguration.model_validate(
        {
            "nodeRegistration": {"kubeletExtraArgs": [{"name": "max-pods", "value": "50"}]},
            "timeouts": {"discoverySeconds": 30},
        }
    )
    old = join_configuration_document(join, "v1.30.4")
    assert old["apiVersion"] == "kubeadm.k8s.io/v1beta3"
    assert old["nodeRegistration"]["kubeletExtraArgs"] == {"max-pods": "50"}
    assert old["discovery"]["timeout"] == "30s"
    assert "timeouts" not in old
    new = join_configuration_document(join, "v1.34.0")
    assert new["nodeRegistration"]["kubeletExtraArgs"] == [{"name": "max-pods", "value": "50"}]
