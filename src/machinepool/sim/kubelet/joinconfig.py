"""Read what a simulated node needs from its bootstrap data: the kubeadm JoinConfiguration.

The kubeadm bootstrap provider writes a cloud-config whose ``write_files`` carries the
JoinConfiguration (``/run/kubeadm/kubeadm-join-config.yaml``); a real node runs
``kubeadm join`` with it. This module finds that document, whatever the file's encoding, and
returns the token, endpoint, CA pins and registration settings. Pure; called by ``agent.py``.
"""

from __future__ import annotations

import base64
import gzip
from dataclasses import dataclass, field
from typing import Any

import yaml

__all__ = ["InvalidBootstrapData", "JoinInfo", "load_yaml", "parse_join"]

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when PyYAML was built with it (the same documents, ten times faster:
every join parses its cloud-config and the cluster's kubeconfig), else the pure-Python one."""


def load_yaml(text: str | bytes) -> Any:
    """``yaml.safe_load``, with libyaml when available."""
    return yaml.load(text, Loader=_LOADER)


class InvalidBootstrapData(ValueError):
    """The bootstrap data holds no usable JoinConfiguration (the message says what is missing)."""


@dataclass(frozen=True)
class JoinInfo:
    """The parts of a JoinConfiguration a simulated node acts on."""

    token: str = field(repr=False)
    """The bootstrap token, ``<id>.<secret>`` (secret: never log it)."""
    api_server_endpoint: str = ""
    """``host:port`` of the workload API server."""
    ca_cert_hashes: tuple[str, ...] = ()
    """``sha256:<hex>`` pins of the cluster CA's public key."""
    unsafe_skip_ca_verification: bool = False
    taints: tuple[dict[str, Any], ...] = ()
    """Taints the Node registers with."""
    node_labels: dict[str, str] = field(default_factory=dict)
    """From kubeletExtraArgs ``node-labels``."""

    @property
    def token_id(self) -> str:
        return self.token.partition(".")[0]


def parse_join(data: bytes) -> JoinInfo:
    """The JoinConfiguration inside cloud-config ``data``; raise ``InvalidBootstrapData``."""
    try:
        doc = load_yaml(data.decode())
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InvalidBootstrapData(f"bootstrap data is not a YAML cloud-config: {exc}") from exc
    if not isinstance(doc, dict):
        raise InvalidBootstrapData("bootstrap data is not a cloud-config mapping")
    for item in doc.get("write_files") or []:
        for join in _documents(item):
            return _join_info(join)
    raise InvalidBootstrapData("bootstrap data has no write_files entry with a JoinConfiguration")


def _documents(item: dict[str, Any]) -> list[dict[str, Any]]:
    content = _content(item)
    if "JoinConfiguration" not in content:
        return []
    try:
        docs = list(yaml.load_all(content, Loader=_LOADER))
    except yaml.YAMLError:
        return []
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == "JoinConfiguration"]


def _content(item: dict[str, Any]) -> str:
    raw = str(item.get("content") or "")
    encoding = str(item.get("encoding") or "")
    data = raw.encode()
    if "b64" in encoding or "base64" in encoding:
        data = base64.b64decode(data)
    if "gz" in encoding:
        data = gzip.decompress(data)
    return data.decode(errors="replace")


def _join_info(join: dict[str, Any]) -> JoinInfo:
    discovery = (join.get("discovery") or {}).get("bootstrapToken") or {}
    token = str(
        discovery.get("token") or (join.get("discovery") or {}).get("tlsBootstrapToken") or ""
    )
    if not token:
        raise InvalidBootstrapData("JoinConfiguration has no discovery.bootstrapToken.token")
    registration = join.get("nodeRegistration") or {}
    return JoinInfo(
        token=token,
        api_server_endpoint=str(discovery.get("apiServerEndpoint") or ""),
        ca_cert_hashes=tuple(str(h) for h in discovery.get("caCertHashes") or ()),
        unsafe_skip_ca_verification=bool(discovery.get("unsafeSkipCAVerification")),
        taints=tuple(dict(t) for t in registration.get("taints") or ()),
        node_labels=_node_labels(registration.get("kubeletExtraArgs")),
    )


def _node_labels(args: Any) -> dict[str, str]:
    """``node-labels`` from kubeletExtraArgs (a list of {name, value} or a mapping)."""
    value = ""
    if isinstance(args, dict):
        value = str(args.get("node-labels") or "")
    elif isinstance(args, list):
        value = ",".join(str(a.get("value", "")) for a in args if a.get("name") == "node-labels")
    labels = {}
    for pair in filter(None, value.split(",")):
        key, _, val = pair.partition("=")
        labels[key.strip()] = val.strip()
    return labels
