"""Pure rendering of a worker's cloud-config: files, users, commands and the kubeadm join.

The KubeadmConfig controller (``data.py``) resolves everything that needs the API first
(``contentFrom`` secrets, the token, the CA pins, the endpoint) into a ``NodeInput`` and calls
``render_node_cloud_config``; nothing here does I/O, so it is unit-tested on its own.

Rendering rules, because instances execute this text:

- the document starts with ``## template: jinja`` as upstream's does, so cloud-init renders
  instance metadata such as ``{{ ds.meta_data["local_hostname"] }}`` on the machine; we never
  touch those expressions;
- strings with line breaks are written as YAML block scalars and nothing is ever folded, so
  what a user wrote in a file comes out byte for byte after cloud-init parses the YAML (PyYAML
  falls back to an escaped double-quoted scalar when a block scalar could not hold the text
  exactly, e.g. trailing spaces: still exact, just less pretty);
- output is deterministic (no times, stable key order), so an unchanged config renders the
  same bytes and the data Secret is not rewritten.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from machinepool.api.bootstrap_v1beta2 import File, JoinConfiguration, User
from machinepool.api.constants import UNINITIALIZED_TAINT_EFFECT, UNINITIALIZED_TAINT_KEY

__all__ = [
    "JOIN_CONFIG_PATH",
    "KUBEADM_API_VERSION",
    "KUBEADM_V1BETA3",
    "SUCCESS_SENTINEL",
    "InvalidBootstrapInput",
    "NodeInput",
    "dump_yaml",
    "join_configuration_document",
    "kubeadm_api_version",
    "render_node_cloud_config",
    "validate_files",
]

KUBEADM_API_VERSION = "kubeadm.k8s.io/v1beta4"
"""For Kubernetes v1.31 and later, and when the version is not known."""
KUBEADM_V1BETA3 = "kubeadm.k8s.io/v1beta3"
"""For Kubernetes v1.22 up to v1.30, as upstream's kubeadm bootstrap provider chooses."""
JOIN_CONFIG_PATH = "/run/kubeadm/kubeadm-join-config.yaml"
SUCCESS_SENTINEL = "/run/cluster-api/bootstrap-success.complete"
_PLACEHOLDER_PATH = "/run/cluster-api/placeholder"
# Creates /run/cluster-api in a way that works on Linux and Windows alike (as upstream does).
_PLACEHOLDER_TEXT = (
    "This placeholder file is used to create the /run/cluster-api sub directory in a way that is"
    " compatible with both Linux and Windows (mkdir -p /run/cluster-api does not work with"
    " Windows)"
)
_HEADER = "## template: jinja\n#cloud-config\n\n"
_PERMISSIONS = re.compile(r"^[0-7]{3,4}$")
_TIMEOUT_KEYS = {
    "controlPlaneComponentHealthCheckSeconds": "controlPlaneComponentHealthCheck",
    "kubeletHealthCheckSeconds": "kubeletHealthCheck",
    "kubernetesAPICallSeconds": "kubernetesAPICall",
    "etcdAPICallSeconds": "etcdAPICall",
    "tlsBootstrapSeconds": "tlsBootstrap",
    "discoverySeconds": "discovery",
}


class InvalidBootstrapInput(ValueError):
    """The KubeadmConfig asks for something that cannot be rendered; the message says the
    field and the fix."""


@dataclass(frozen=True)
class NodeInput:
    """Everything a worker's cloud-config needs, already resolved.

    ``files`` carry inline ``content`` only (``contentFrom`` resolved by the caller);
    ``join_configuration`` is the user's, with discovery filled in by the caller.
    """

    join_configuration: JoinConfiguration
    files: Sequence[File] = ()
    users: Sequence[User] = ()
    boot_commands: Sequence[str] = ()
    pre_kubeadm_commands: Sequence[str] = ()
    post_kubeadm_commands: Sequence[str] = ()
    ntp: dict[str, Any] | None = None
    mounts: Sequence[Sequence[str]] = ()
    disk_setup: dict[str, Any] | None = None
    verbosity: int | None = None
    kubernetes_version: str = ""
    """The owner's version (``v1.30.4``): it selects the kubeadm API version of the join."""
    extra: dict[str, Any] = field(default_factory=dict)


class _Dumper(yaml.SafeDumper):
    """SafeDumper that writes multi-line strings as block scalars and indents lists."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def dump_yaml(data: Any) -> str:
    """YAML that parses back to exactly ``data``: block scalars, keys in insertion order, and
    no line folding (width is unbounded)."""
    return yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=2**31 - 1,
    )


def validate_files(files: Sequence[File]) -> None:
    """Reject files the machine could not write; raise ``InvalidBootstrapInput``."""
    for i, item in enumerate(files):
        where = f"spec.files[{i}] ({item.path})"
        if item.permissions is not None and not _PERMISSIONS.match(item.permissions):
            raise InvalidBootstrapInput(
                f"{where}: permissions {item.permissions!r} is not an octal mode; write it as"
                ' 3 or 4 octal digits in quotes, e.g. "0644"'
            )
        if not item.path.startswith("/") and not re.match(r"^[A-Za-z]:[\\/]", item.path):
            raise InvalidBootstrapInput(f"{where}: path must be absolute, e.g. /etc/example.conf")


def _timeouts(join: dict[str, Any]) -> None:
    """kubeadm v1beta4 takes durations ("240s"); the KubeadmConfig API takes seconds."""
    timeouts = join.pop("timeouts", None)
    if not timeouts:
        return
    join["timeouts"] = {
        _TIMEOUT_KEYS.get(k, k): f"{v}s" if isinstance(v, int) else v for k, v in timeouts.items()
    }


def kubeadm_api_version(kubernetes_version: str) -> str:
    """The kubeadm API a node of ``kubernetes_version`` reads: v1beta3 before v1.31, v1beta4
    from it (and when the version is unknown). Raises ``InvalidBootstrapInput`` before v1.22,
    which no kubeadm API this provider writes supports."""
    match = re.match(r"^v?(\d+)\.(\d+)", kubernetes_version)
    if match is None:
        return KUBEADM_API_VERSION
    minor = (int(match.group(1)), int(match.group(2)))
    if minor < (1, 22):
        raise InvalidBootstrapInput(
            f"Kubernetes {kubernetes_version} is older than v1.22, the oldest version whose"
            " kubeadm this provider can configure; use v1.22 or later"
        )
    return KUBEADM_V1BETA3 if minor < (1, 31) else KUBEADM_API_VERSION


def join_configuration_document(
    join: JoinConfiguration, kubernetes_version: str = ""
) -> dict[str, Any]:
    """The kubeadm ``JoinConfiguration`` for a worker, as a dict, in the kubeadm API version
    that ``kubernetes_version`` reads (``kubeadm_api_version``).

    Adds the ``node.cluster.x-k8s.io/uninitialized:NoSchedule`` taint, as upstream does, so
    no workload lands on the Node before Cluster API has initialised it. The caller's model is
    not modified.
    """
    body = join.to_dict()
    registration = body.setdefault("nodeRegistration", {})
    taints: list[dict[str, Any]] = list(registration.get("taints") or [])
    if not any(t.get("key") == UNINITIALIZED_TAINT_KEY for t in taints):
        taints.append({"key": UNINITIALIZED_TAINT_KEY, "effect": UNINITIALIZED_TAINT_EFFECT})
    registration["taints"] = taints
    _timeouts(body)
    api_version = kubeadm_api_version(kubernetes_version)
    if api_version == KUBEADM_V1BETA3:
        _to_v1beta3(body)
    return {"apiVersion": api_version, "kind": "JoinConfiguration", **body}


def _to_v1beta3(join: dict[str, Any]) -> None:
    """v1beta4's shape as v1beta3 spells it: kubelet arguments as a map (the last value of a
    repeated name wins), the discovery timeout under discovery; v1beta4-only fields dropped."""
    registration = join.get("nodeRegistration") or {}
    args = registration.get("kubeletExtraArgs")
    if isinstance(args, list):
        registration["kubeletExtraArgs"] = {str(a["name"]): str(a["value"]) for a in args}
    registration.pop("imagePullSerial", None)
    timeouts = join.pop("timeouts", None) or {}
    if "discovery" in timeouts:
        join.setdefault("discovery", {})["timeout"] = timeouts["discovery"]


def _file_entry(item: File) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": item.path}
    if item.owner:
        entry["owner"] = item.owner
    if item.permissions:
        entry["permissions"] = item.permissions
    if item.encoding:
        entry["encoding"] = item.encoding
    if item.append:
        entry["append"] = True
    entry["content"] = item.content or ""
    return entry


def _user_entry(user: User) -> dict[str, Any]:
    # cloud-init spells these differently from the KubeadmConfig API.
    pairs: list[tuple[str, Any]] = [
        ("name", user.name),
        ("gecos", user.gecos),
        ("groups", user.groups),
        ("homedir", user.home_dir),
        ("inactive", True if user.inactive else None),
        ("lock_passwd", user.lock_password),
        ("passwd", user.passwd),
        ("primary_group", user.primary_group),
        ("shell", user.shell),
        ("ssh_authorized_keys", list(user.ssh_authorized_keys or []) or None),
        ("sudo", user.sudo),
    ]
    return {k: v for k, v in pairs if v is not None}


def _disk_setup(disk_setup: dict[str, Any], doc: dict[str, Any]) -> None:
    partitions = disk_setup.get("partitions") or []
    if partitions:
        doc["disk_setup"] = {
            p["device"]: {
                k: v
                for k, v in (
                    ("table_type", p.get("tableType", "gpt")),
                    ("layout", p.get("layout", True)),
                    ("overwrite", p.get("overwrite")),
                )
                if v is not None
            }
            for p in partitions
            if p.get("device")
        }
    filesystems = disk_setup.get("filesystems") or []
    if filesystems:
        keys = (
            ("label", "label"),
            ("filesystem", "filesystem"),
            ("device", "device"),
            ("partition", "partition"),
            ("overwrite", "overwrite"),
            ("replaceFS", "replace_fs"),
            ("extraOpts", "extra_opts"),
        )
        doc["fs_setup"] = [{out: fs[k] for k, out in keys if k in fs} for fs in filesystems]


def render_node_cloud_config(node: NodeInput) -> str:
    """The cloud-config that joins a worker with ``kubeadm join``.

    Raises ``InvalidBootstrapInput`` for files the machine could not write.

    >>> text = render_node_cloud_config(NodeInput(JoinConfiguration()))
    >>> text.splitlines()[:2]
    ['## template: jinja', '#cloud-config']
    """
    validate_files(node.files)
    join_doc = join_configuration_document(node.join_configuration, node.kubernetes_version)
    join_yaml = "---\n" + dump_yaml(join_doc)
    write_files = [_file_entry(f) for f in node.files]
    write_files.append(
        {
            "path": JOIN_CONFIG_PATH,
            "owner": "root:root",
            "permissions": "0640",
            "content": join_yaml,
        }
    )
    write_files.append(
        {
            "path": _PLACEHOLDER_PATH,
            "owner": "root:root",
            "permissions": "0640",
            "content": _PLACEHOLDER_TEXT,
        }
    )
    # Upstream's template leaves a space for the verbosity flag even when there is none: the
    # same bytes as upstream's, so a user diffing the two sees no difference.
    verbosity = f"--v {node.verbosity}" if node.verbosity is not None else ""
    join_cmd = (
        f"kubeadm join --config {JOIN_CONFIG_PATH} {verbosity} && echo success > {SUCCESS_SENTINEL}"
    )
    doc: dict[str, Any] = {"write_files": write_files}
    doc["runcmd"] = [*node.pre_kubeadm_commands, join_cmd, *node.post_kubeadm_commands]
    if node.boot_commands:
        doc["bootcmd"] = list(node.boot_commands)
    if node.users:
        doc["users"] = [_user_entry(u) for u in node.users]
    if node.ntp:
        doc["ntp"] = {k: v for k, v in node.ntp.items() if k in ("enabled", "servers")}
    if node.mounts:
        doc["mounts"] = [list(m) for m in node.mounts]
    if node.disk_setup:
        _disk_setup(node.disk_setup, doc)
    doc.update(node.extra)
    return _HEADER + dump_yaml(doc)
