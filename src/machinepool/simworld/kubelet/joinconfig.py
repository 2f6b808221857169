"""Read what a simulated node needs from its bootstrap data: the kubeadm JoinConfiguration.

The kubeadm bootstrap provider writes a cloud-config whose ``write_files`` carries the
JoinConfiguration (``/run/kubeadm/kubeadm-join-config.yaml``); a real node runs
``kubeadm join`` with it. This module finds that document, whatever the file's encoding, and
returns the token, endpoint, CA pins and registration settings. Pure; called by ``agent.py``.

The Node's name comes from ``nodeRegistration.name`` when set, else the machine's hostname
(``JoinInfo.node_name``), as kubeadm decides it. Providers' templates set the name to instance
metadata through cloud-init's jinja (``'{{ ds.meta_data["local_hostname"] }}'`` in ours and
CAPZ's, ``'{{ ds.meta_data.local_hostname }}'`` in CAPA's, ``'{{ local_hostname }}'`` in
CAPV's and CAPO's), which cloud-init renders on the machine only when the document starts with
``## template: jinja``. The simulator renders those variable look-ups from the instance's
metadata; anything else jinja could do (filters, blocks) it refuses as unusable, as it would
have to guess, and a name that is not a valid Node name is refused as kubeadm refuses it.
"""

from __future__ import annotations

import base64
import gzip
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from machinepool.runtime.kube.yamlio import YAML_LOADER, load_yaml

__all__ = ["InvalidBootstrapData", "JoinInfo", "parse_join", "render_template"]


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
    name: str = ""
    """``nodeRegistration.name`` as written, a jinja template possibly; empty: the hostname."""
    jinja: bool = False
    """The cloud-config starts with ``## template: jinja``: cloud-init renders it."""

    @property
    def token_id(self) -> str:
        return self.token.partition(".")[0]

    def node_name(self, hostname: str, meta_data: Mapping[str, str]) -> str:
        """The name the Node registers under on a machine called ``hostname`` whose metadata
        service answers ``meta_data`` (cloud-init's ``ds.meta_data``); raise
        ``InvalidBootstrapData`` when it cannot be a Node's name.

        >>> info = JoinInfo(token="a.b", name="{{ ds.meta_data.local_hostname }}", jinja=True)
        >>> info.node_name("ip-10-0-0-9.sim.internal", {"local_hostname": "ip-10-0-0-9.x"})
        'ip-10-0-0-9.x'
        """
        if not self.name:
            name = hostname.lower()  # kubelet's default: the hostname, lower-cased
        elif self.jinja:
            name = render_template(self.name, meta_data)
        else:
            name = self.name
        if len(name) > 253 or not _SUBDOMAIN.match(name):
            raise InvalidBootstrapData(
                f"nodeRegistration.name {name!r} is not a valid Node name (a lower-case DNS"
                " subdomain)"
            )
        return name


_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_EXPRESSION = re.compile(r"{{(.*?)}}|{%|{#")
_LOOKUP = re.compile(
    r"""^\s*(?:(?P<ds>ds\.meta_data)(?:\.(?P<attr>\w+)|\[\s*(?P<q>["'])(?P<key>\w+)(?P=q)\s*\])"""
    r"""|(?:v1\.)?(?P<v1>\w+))\s*$"""
)


def _standard_keys(meta_data: Mapping[str, str]) -> dict[str, str]:
    """cloud-init's standard ``v1`` keys (also available at top level) that the simulator
    can answer, from the datasource's metadata."""
    keys = {"cloud_name": "sim", "platform": "sim"}
    for key in ("local_hostname", "instance_id", "availability_zone"):
        if key in meta_data:
            keys[key] = meta_data[key]
    return keys


def render_template(text: str, meta_data: Mapping[str, str]) -> str:
    """``text`` with each ``{{ variable }}`` replaced as cloud-init's jinja would: look-ups of
    ``ds.meta_data.<key>``, ``ds.meta_data["<key>"]`` and the ``v1`` keys (``v1.local_hostname``
    or ``local_hostname``). Raise ``InvalidBootstrapData`` for anything else (an unknown key,
    a filter, a block): cloud-init would render what the simulator cannot know.
    """

    def one(match: re.Match[str]) -> str:
        expression = match.group(1)
        lookup = _LOOKUP.match(expression or "")
        if lookup is None:
            raise InvalidBootstrapData(
                f"nodeRegistration.name {text!r}: the node simulator renders variable look-ups"
                f" only, not {match.group(0)!r}"
            )
        if lookup.group("ds"):
            key = lookup.group("attr") or lookup.group("key")
            value = meta_data.get(key)
        else:
            key = lookup.group("v1")
            value = _standard_keys(meta_data).get(key)
        if value is None:
            raise InvalidBootstrapData(
                f"nodeRegistration.name {text!r}: the instance metadata has no {key!r}"
            )
        return value

    return _EXPRESSION.sub(one, text)


def parse_join(data: bytes) -> JoinInfo:
    """The JoinConfiguration inside cloud-config ``data``; raise ``InvalidBootstrapData``."""
    try:
        text = data.decode()
        doc = load_yaml(text)
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InvalidBootstrapData(f"bootstrap data is not a YAML cloud-config: {exc}") from exc
    if not isinstance(doc, dict):
        raise InvalidBootstrapData("bootstrap data is not a cloud-config mapping")
    jinja = text.lstrip().startswith("## template: jinja")
    for item in doc.get("write_files") or []:
        for join in _documents(item):
            return _join_info(join, jinja)
    raise InvalidBootstrapData("bootstrap data has no write_files entry with a JoinConfiguration")


def _documents(item: dict[str, Any]) -> list[dict[str, Any]]:
    content = _content(item)
    if "JoinConfiguration" not in content:
        return []
    try:
        docs = list(yaml.load_all(content, Loader=YAML_LOADER))
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


def _join_info(join: dict[str, Any], jinja: bool) -> JoinInfo:
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
        name=str(registration.get("name") or ""),
        jinja=jinja,
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
