"""Pure Ignition rendering (spec.format: ignition): the JSON a Flatcar node receives."""

from __future__ import annotations

import base64
import json
import re
from typing import Any
from urllib.parse import unquote

import pytest

from machinepool.api.bootstrap_v1beta2 import File, JoinConfiguration, KubeadmConfigSpec, User
from machinepool.bootstrap.kubeadm.cloudinit import InvalidBootstrapInput, NodeInput
from machinepool.bootstrap.kubeadm.ignition import ignition_spec_problem, render_node_ignition


def _render(node: NodeInput, extra: str = "") -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(render_node_ignition(node, extra))
    return doc


def _files(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["path"]: f for f in doc["storage"]["files"]}


def _text(entry: dict[str, Any]) -> str:
    source: str = entry["contents"]["source"]
    if source.startswith("data:;base64,"):
        return base64.b64decode(source.removeprefix("data:;base64,")).decode()
    return unquote(source.removeprefix("data:,"))


def test_join_script_unit_and_config_are_written_as_upstream_does() -> None:
    node = NodeInput(
        JoinConfiguration(),
        pre_kubeadm_commands=["pre-command", "another-pre-command"],
        post_kubeadm_commands=["post-kubeadm-command"],
        verbosity=3,
    )
    doc = _render(node)
    assert doc["ignition"]["version"] == "2.3.0"
    files = _files(doc)
    script = files["/etc/kubeadm.sh"]
    assert script["mode"] == 0o700
    assert _text(script) == (
        "#!/bin/bash\nset -e\n\npre-command\nanother-pre-command\n\n"
        "kubeadm join --config /etc/kubeadm.yml --v 3\n"
        "mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n"
        "mv /etc/kubeadm.yml /tmp/\n\npost-kubeadm-command\n"
    )
    config = _text(files["/etc/kubeadm.yml"])
    assert config.startswith("---\n")
    assert "kind: JoinConfiguration" in config
    assert files["/etc/kubeadm.yml"]["mode"] == 0o600
    unit = doc["systemd"]["units"][0]
    assert unit["name"] == "kubeadm.service"
    assert unit["enabled"] is True
    assert "ExecStart=/bin/bash /etc/kubeadm.sh" in unit["contents"]


def test_user_files_users_sudo_and_ntp() -> None:
    node = NodeInput(
        JoinConfiguration(),
        files=[
            File(
                path="/etc/a.conf", content="a=b (c): d", owner="nobody:wheel", permissions="0644"
            ),
            File(
                path="/etc/b.bin", content=base64.b64encode(b"\xff\x00").decode(), encoding="base64"
            ),
        ],
        users=[
            User(
                name="foo",
                gecos="Foo B. Bar",
                groups="foo, bar",
                home_dir="/home/foo",
                shell="/bin/false",
                sudo="ALL=(ALL) NOPASSWD:ALL",
                lock_password=False,
                ssh_authorized_keys=["ssh-rsa AAA"],
            )
        ],
        ntp={"enabled": True, "servers": ["foo.bar", "baz"]},
    )
    doc = _render(node)
    files = _files(doc)
    # The escaping Flatcar's transpiler uses (upstream's test value).
    assert files["/etc/sudoers.d/foo"]["contents"]["source"] == (
        "data:,foo%20ALL%3D(ALL)%20NOPASSWD%3AALL%0A"
    )
    assert files["/etc/a.conf"]["user"] == {"name": "nobody"}
    assert files["/etc/a.conf"]["group"] == {"name": "wheel"}
    assert files["/etc/a.conf"]["mode"] == 420
    assert _text(files["/etc/a.conf"]) == "a=b (c): d\n"
    assert files["/etc/b.bin"]["contents"]["source"].startswith("data:;base64,")
    assert "Match User foo\n  PasswordAuthentication yes\n" in _text(files["/etc/ssh/sshd_config"])
    assert _text(files["/etc/ntp.conf"]).startswith("# Common pool\nserver foo.bar\nserver baz\n")
    assert {"name": "ntpd.service", "enabled": True} in doc["systemd"]["units"]
    assert doc["passwd"]["users"] == [
        {
            "name": "foo",
            "gecos": "Foo B. Bar",
            "groups": ["foo", "bar"],
            "homeDir": "/home/foo",
            "shell": "/bin/false",
            "sshAuthorizedKeys": ["ssh-rsa AAA"],
        }
    ]


def test_additional_config_is_appended() -> None:
    extra = (
        "storage:\n  files:\n  - path: /etc/x\n    contents:\n      inline: hi\n"
        "systemd:\n  units:\n  - name: docker.service\n    mask: true\n"
        "passwd:\n  users:\n  - name: core\n    ssh_authorized_keys: [k]\n"
    )
    doc = _render(NodeInput(JoinConfiguration()), extra)
    assert _text(_files(doc)["/etc/x"]) == "hi"
    assert _files(doc)["/etc/x"]["mode"] == 420
    assert {"name": "docker.service", "mask": True} in doc["systemd"]["units"]
    assert {"name": "core", "sshAuthorizedKeys": ["k"]} in doc["passwd"]["users"]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("networkd:\n  units: []\n", "additionalConfig: networkd"),
        ("storage:\n  raid: []\n", "storage.raid"),
        ("systemd:\n  units:\n  - name: a\n    bogus: 1\n", "systemd.units[0].bogus"),
        ("storage:\n  files:\n  - path: /x\n    contents:\n      remote: {}\n", "contents.remote"),
    ],
)
def test_additional_config_outside_the_subset_names_the_field(extra: str, field: str) -> None:
    with pytest.raises(InvalidBootstrapInput, match=re.escape(field)):
        render_node_ignition(NodeInput(JoinConfiguration()), extra)


def test_mounts_are_refused_with_the_field() -> None:
    with pytest.raises(InvalidBootstrapInput, match=r"spec\.mounts"):
        render_node_ignition(NodeInput(JoinConfiguration(), mounts=[["ephemeral0", "/mnt"]]))


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (
            {"format": "ignition", "users": [{"name": "a", "inactive": True}]},
            "spec.users[0].inactive",
        ),
        (
            {
                "format": "ignition",
                "files": [{"path": "/a", "permissions": "0644", "encoding": "gzip"}],
            },
            "spec.files[0].encoding",
        ),
        ({"format": "ignition", "bootCommands": ["x"]}, "spec.bootCommands"),
        ({"format": "ignition", "files": [{"path": "/a"}]}, "spec.files[0].permissions"),
        ({"format": "cloud-config", "ignition": {"containerLinuxConfig": {}}}, "spec.format"),
    ],
)
def test_fields_that_cannot_be_used_with_ignition(spec: dict[str, Any], field: str) -> None:
    assert ignition_spec_problem(KubeadmConfigSpec.from_dict(spec)).startswith(field + ":")


def test_a_valid_ignition_spec_has_no_problem() -> None:
    assert ignition_spec_problem(KubeadmConfigSpec.from_dict({"format": "ignition"})) == ""
