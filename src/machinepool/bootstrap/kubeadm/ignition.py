"""Pure rendering of a worker's bootstrap data as Ignition v2.3 JSON (``spec.format: ignition``).

Upstream fills a Container Linux Config template and runs Flatcar's transpiler over it; we build
the transpiler's output directly, so what a node receives is the same JSON document: the user's
files and users, ``/etc/kubeadm.sh`` (pre commands, the join, post commands) run once by a
``kubeadm.service`` unit, the join configuration at ``/etc/kubeadm.yml``, sudoers and sshd files
for users who ask for them, and ntp. ``spec.ignition.containerLinuxConfig.additionalConfig`` is
CLC YAML appended after ours; only the common subset is understood (``storage.files``,
``systemd.units``, ``passwd.users``) and anything else raises ``InvalidBootstrapInput`` naming
the field, which the controller turns into a RenderFailed condition.

Nothing here does I/O. Output is deterministic (sorted keys), so an unchanged config renders the
same bytes and the data Secret is not rewritten.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote

import yaml

from machinepool.api.bootstrap_v1beta2 import File, KubeadmConfigSpec, User
from machinepool.bootstrap.kubeadm.cloudinit import (
    SUCCESS_SENTINEL,
    InvalidBootstrapInput,
    NodeInput,
    dump_yaml,
    join_configuration_document,
    validate_files,
)

__all__ = [
    "IGNITION_CONFIG_PATH",
    "ignition_spec_problem",
    "render_node_ignition",
    "translate_additional_config",
]

IGNITION_CONFIG_PATH = "/etc/kubeadm.yml"
_KUBEADM_SCRIPT = "/etc/kubeadm.sh"
_KUBEADM_UNIT = (
    "[Unit]\n"
    "Description=kubeadm\n"
    "# Run only once. After successful run, this file is moved to /tmp/.\n"
    f"ConditionPathExists={IGNITION_CONFIG_PATH}\n"
    "After=network.target\n"
    "[Service]\n"
    "# To not restart the unit when it exits, as it is expected.\n"
    "Type=oneshot\n"
    f"ExecStart=/bin/bash {_KUBEADM_SCRIPT}\n"
    "[Install]\n"
    "WantedBy=multi-user.target\n"
)
# The sshd configuration upstream writes when a user unlocks password login.
_SSHD_HEAD = (
    "# Use most defaults for sshd configuration.\n"
    "Subsystem sftp internal-sftp\n"
    "ClientAliveInterval 180\n"
    "UseDNS no\n"
    "UsePAM yes\n"
    "PrintLastLog no # handled by PAM\n"
    "PrintMotd no # handled by PAM\n"
    "\n"
)
_NTP_TAIL = (
    "\n"
    "# Warning: Using default NTP settings will leave your NTP\n"
    "# server accessible to all hosts on the Internet.\n"
    "\n"
    "# If you want to deny all machines (including your own)\n"
    "# from accessing the NTP server, uncomment:\n"
    "#restrict default ignore\n"
    "\n"
    "# Default configuration:\n"
    "# - Allow only time queries, at a limited rate, sending KoD when in excess.\n"
    "# - Allow all local queries (IPv4, IPv6)\n"
    "restrict default nomodify nopeer noquery notrap limited kod\n"
    "restrict 127.0.0.1\n"
    "restrict [::1]\n"
)
# CLC keys of the subset we translate; anything else is refused with its path.
_FILE_KEYS = {"path", "filesystem", "mode", "contents", "user", "group", "overwrite", "append"}
_UNIT_KEYS = {"name", "enabled", "enable", "mask", "contents", "dropins"}
_USER_KEYS = {
    "name",
    "password_hash",
    "ssh_authorized_keys",
    "home_dir",
    "gecos",
    "groups",
    "primary_group",
    "shell",
    "uid",
    "no_create_home",
    "system",
}


def _clip(text: str) -> str:
    """Text as a YAML ``|`` block scalar keeps it: trailing line breaks become exactly one."""
    return text.rstrip("\n") + "\n"


def _data_url(data: bytes) -> str:
    """A ``data:`` URL as the transpiler writes it: plain text escaped, binary in base64."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "data:;base64," + base64.b64encode(data).decode()
    return "data:," + quote(text, safe="-_.!~*'()")


def _file(
    path: str, data: bytes, mode: int | None = None, owner: str | None = None
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "filesystem": "root",
        "path": path,
        "contents": {"source": _data_url(data), "verification": {}},
    }
    if mode is not None:
        entry["mode"] = mode
    if owner:
        user, _, group = owner.partition(":")
        if user.strip():
            entry["user"] = {"name": user.strip()}
        if group.strip():
            entry["group"] = {"name": group.strip()}
    return entry


def _user_file(node_file: File) -> dict[str, Any]:
    content = _clip(node_file.content or "")
    data = content.encode()
    if node_file.encoding == "base64":
        data = base64.b64decode(content)
    mode = int(node_file.permissions, 8) if node_file.permissions else None
    return _file(node_file.path, data, mode, node_file.owner)


def _user(user: User) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": user.name}
    if user.gecos:
        entry["gecos"] = user.gecos
    if user.groups:
        entry["groups"] = user.groups.split(", ")
    if user.home_dir:
        entry["homeDir"] = user.home_dir
    if user.shell:
        entry["shell"] = user.shell
    if user.passwd:
        entry["passwordHash"] = user.passwd
    if user.primary_group:
        entry["primaryGroup"] = user.primary_group
    if user.ssh_authorized_keys:
        entry["sshAuthorizedKeys"] = list(user.ssh_authorized_keys)
    return entry


def _script(node: NodeInput) -> str:
    verbosity = f"--v {node.verbosity}" if node.verbosity is not None else ""
    lines = "#!/bin/bash\nset -e\n"
    lines += "".join("\n" + c for c in node.pre_kubeadm_commands)
    lines += f"\n\nkubeadm join --config {IGNITION_CONFIG_PATH} {verbosity}\n"
    lines += f"mkdir -p /run/cluster-api && echo success > {SUCCESS_SENTINEL}\n"
    lines += f"mv {IGNITION_CONFIG_PATH} /tmp/\n"
    lines += "".join("\n" + c for c in node.post_kubeadm_commands)
    return _clip(lines)


def _refuse(where: str, key: str, allowed: set[str]) -> None:
    raise InvalidBootstrapInput(
        f"spec.ignition.containerLinuxConfig.additionalConfig: {where}{key} is not supported"
        f" by this provider; use only {', '.join(sorted(allowed))} there"
    )


def _check(item: Any, where: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise InvalidBootstrapInput(
            f"spec.ignition.containerLinuxConfig.additionalConfig: {where or 'the document'} must"
            " be a mapping"
        )
    for key in item:
        if key not in allowed:
            _refuse(f"{where}." if where else "", str(key), allowed)
    return item


def translate_additional_config(text: str) -> dict[str, list[dict[str, Any]]]:
    """The Ignition parts of ``additionalConfig`` CLC YAML: ``files``, ``units``, ``users``.

    Raises ``InvalidBootstrapInput`` naming the first field outside the supported subset.

    >>> translate_additional_config("systemd:\\n  units:\\n  - name: a.service\\n    mask: true\\n")
    {'files': [], 'units': [{'name': 'a.service', 'mask': True}], 'users': []}
    """
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise InvalidBootstrapInput(
            f"spec.ignition.containerLinuxConfig.additionalConfig is not valid YAML: {exc}"
        ) from exc
    doc = _check(doc, "", {"storage", "systemd", "passwd"})
    out: dict[str, list[dict[str, Any]]] = {"files": [], "units": [], "users": []}
    storage = _check(doc.get("storage") or {}, "storage", {"files"})
    for i, f in enumerate(storage.get("files") or []):
        f = _check(f, f"storage.files[{i}]", _FILE_KEYS)
        contents = _check(f.get("contents") or {}, f"storage.files[{i}].contents", {"inline"})
        inline = contents.get("inline", "")
        data = inline if isinstance(inline, bytes) else str(inline).encode()
        # Not read strictly (upstream's default), so a missing mode becomes 0644 as there.
        entry = _file(str(f["path"]), data, f.get("mode", 0o644))
        entry["filesystem"] = f.get("filesystem", "root")
        for key in ("user", "group"):
            if key in f:
                entry[key] = {("id" if k == "id" else "name"): v for k, v in f[key].items()}
        for key in ("overwrite", "append"):
            if key in f:
                entry[key] = f[key]
        out["files"].append(entry)
    systemd = _check(doc.get("systemd") or {}, "systemd", {"units"})
    for i, u in enumerate(systemd.get("units") or []):
        u = _check(u, f"systemd.units[{i}]", _UNIT_KEYS)
        unit = {k: v for k, v in u.items() if k != "dropins"}
        if "dropins" in u:
            unit["dropins"] = [dict(d) for d in u["dropins"]]
        out["units"].append(unit)
    passwd = _check(doc.get("passwd") or {}, "passwd", {"users"})
    camel = {
        "password_hash": "passwordHash",
        "ssh_authorized_keys": "sshAuthorizedKeys",
        "home_dir": "homeDir",
        "primary_group": "primaryGroup",
        "no_create_home": "noCreateHome",
    }
    for i, p in enumerate(passwd.get("users") or []):
        p = _check(p, f"passwd.users[{i}]", _USER_KEYS)
        out["users"].append({camel.get(k, k): v for k, v in p.items()})
    return out


def render_node_ignition(node: NodeInput, additional_config: str = "") -> str:
    """Ignition v2.3 JSON that joins a worker with ``kubeadm join``.

    Raises ``InvalidBootstrapInput`` for files the machine could not write, for mounts and
    disk setup (not rendered for Ignition by this provider yet) and for additional config
    outside the supported subset.

    >>> from machinepool.api.bootstrap_v1beta2 import JoinConfiguration
    >>> json.loads(render_node_ignition(NodeInput(JoinConfiguration())))["ignition"]["version"]
    '2.3.0'
    """
    validate_files(node.files)
    if node.mounts or node.disk_setup:
        field_name = "spec.mounts" if node.mounts else "spec.diskSetup"
        raise InvalidBootstrapInput(
            f"{field_name} is not rendered for spec.format ignition by this provider; remove it"
            " and declare the disk with spec.ignition.containerLinuxConfig.additionalConfig"
            " storage.files / systemd.units (a .mount unit)"
        )
    join_doc = join_configuration_document(node.join_configuration, node.kubernetes_version)
    files: list[dict[str, Any]] = []
    users = [_user(u) for u in node.users]
    for u in node.users:
        if u.sudo:
            files.append(_file(f"/etc/sudoers.d/{u.name}", f"{u.name} {u.sudo}\n".encode(), 0o600))
    password_users = [u.name for u in node.users if u.lock_password is False]
    if password_users:
        sshd = _SSHD_HEAD + f"Match User {','.join(password_users)}\n  PasswordAuthentication yes\n"
        files.append(_file("/etc/ssh/sshd_config", sshd.encode(), 0o600))
    files.extend(_user_file(f) for f in node.files)
    files.append(_file(_KUBEADM_SCRIPT, _script(node).encode(), 0o700))
    files.append(_file(IGNITION_CONFIG_PATH, _clip("---\n" + dump_yaml(join_doc)).encode(), 0o600))
    units: list[dict[str, Any]] = [
        {"name": "kubeadm.service", "enabled": True, "contents": _KUBEADM_UNIT}
    ]
    ntp = node.ntp or {}
    if ntp.get("enabled"):
        units.append({"name": "ntpd.service", "enabled": True})
        if ntp.get("servers"):
            body = "# Common pool\n" + "".join(f"server {s}\n" for s in ntp["servers"])
            files.append(_file("/etc/ntp.conf", (body + _NTP_TAIL).encode(), 0o644))
    extra = translate_additional_config(additional_config) if additional_config else None
    if extra is not None:
        files.extend(extra["files"])
        units.extend(extra["units"])
        users.extend(extra["users"])
    config: dict[str, Any] = {
        "ignition": {
            "config": {},
            "security": {"tls": {}},
            "timeouts": {},
            "version": "2.3.0",
        },
        "networkd": {},
        "passwd": {"users": users} if users else {},
        "storage": {"files": files},
        "systemd": {"units": units},
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def ignition_spec_problem(spec: KubeadmConfigSpec) -> str:
    """The first field that cannot be used with ``spec.format`` as set, or "".

    Upstream's admission webhook rejects these; this provider has no KubeadmConfig webhook
    yet, so the controller reports them as a RenderFailed condition before making a token.
    """
    if spec.format != "ignition":
        if spec.ignition:
            return 'spec.format: must be set to "ignition" if spec.ignition is set'
        return ""
    suffix = 'not supported when spec.format is set to "ignition"; remove it'
    for i, user in enumerate(spec.users or []):
        if user.inactive:
            return f"spec.users[{i}].inactive: {suffix}"
    for i, item in enumerate(spec.files or []):
        if not item.permissions:
            # Upstream's transpiler reads its own template strictly and fails on a file
            # without a mode; say so before any render instead.
            return (
                f'spec.files[{i}].permissions: required when spec.format is "ignition";'
                ' set it, e.g. "0644"'
            )
        if item.encoding in ("gzip", "gzip+base64"):
            return f"spec.files[{i}].encoding: {item.encoding!r} is {suffix} (use base64 or none)"
    if spec.boot_commands is not None:
        return f"spec.bootCommands: {suffix} (use preKubeadmCommands)"
    return ""
