"""The workload cluster's CA and API endpoint, read from the Secrets Cluster API writes.

``data.py`` needs the CA, whose public-key pin (``runtime.services.pki.ca_public_key_hash``)
``kubeadm join`` checks during bootstrap-token discovery, and an endpoint to join. Both come
from the management cluster: ``<cluster>-ca`` (key ``tls.crt``) when a control plane provider
wrote one, else the ``certificate-authority-data`` and ``server`` of ``<cluster>-kubeconfig``
(key ``value``).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import yaml
from cryptography import x509

from machinepool.runtime.kube.yamlio import load_yaml

__all__ = [
    "CAInfo",
    "InvalidClusterSecret",
    "ca_from_ca_secret",
    "ca_from_kubeconfig",
    "endpoint_from_server",
]


class InvalidClusterSecret(ValueError):
    """A ``<cluster>-ca`` or ``<cluster>-kubeconfig`` Secret that cannot be used."""


@dataclass(frozen=True)
class CAInfo:
    """The cluster CA (PEM) and, from a kubeconfig, the API server URL."""

    ca_pem: bytes
    server: str = ""


def _check_pem(pem: bytes, where: str) -> bytes:
    try:
        x509.load_pem_x509_certificate(pem)
    except ValueError as exc:
        raise InvalidClusterSecret(f"{where} is not a PEM certificate") from exc
    return pem


def ca_from_ca_secret(secret: dict[str, Any]) -> CAInfo:
    """The CA of a ``<cluster>-ca`` Secret (``data["tls.crt"]``)."""
    name = (secret.get("metadata") or {}).get("name", "")
    encoded = (secret.get("data") or {}).get("tls.crt")
    if not encoded:
        raise InvalidClusterSecret(f"secret {name} has no data key tls.crt")
    return CAInfo(_check_pem(base64.b64decode(encoded), f"secret {name} key tls.crt"))


def _current_cluster(config: dict[str, Any]) -> dict[str, Any]:
    clusters = {c.get("name"): c.get("cluster") or {} for c in config.get("clusters") or []}
    contexts = {c.get("name"): c.get("context") or {} for c in config.get("contexts") or []}
    context = contexts.get(config.get("current-context"))
    if context and context.get("cluster") in clusters:
        return clusters[context["cluster"]]
    if clusters:
        return next(iter(clusters.values()))
    return {}


def ca_from_kubeconfig(secret: dict[str, Any], ca_pem: bytes | None = None) -> CAInfo:
    """The CA and server of a ``<cluster>-kubeconfig`` Secret (``data["value"]``).

    ``ca_pem`` (from a ``<cluster>-ca`` Secret) wins over the kubeconfig's CA, which then
    need not be there. Never includes the kubeconfig's credentials in an error message.
    """
    name = (secret.get("metadata") or {}).get("name", "")
    encoded = (secret.get("data") or {}).get("value")
    if not encoded:
        raise InvalidClusterSecret(f"secret {name} has no data key 'value' (the kubeconfig)")
    try:
        config = load_yaml(base64.b64decode(encoded))
    except (ValueError, yaml.YAMLError) as exc:
        raise InvalidClusterSecret(f"secret {name} key 'value' is not kubeconfig YAML") from exc
    if not isinstance(config, dict):
        raise InvalidClusterSecret(f"secret {name} key 'value' is not a kubeconfig")
    cluster = _current_cluster(config)
    server = str(cluster.get("server") or "")
    if ca_pem is not None:
        return CAInfo(ca_pem, server)
    ca_data = cluster.get("certificate-authority-data")
    if not ca_data:
        raise InvalidClusterSecret(
            f"the kubeconfig in secret {name} has no clusters[].cluster.certificate-authority-data;"
            f" write the CA inline or provide a <cluster>-ca secret with tls.crt"
        )
    try:
        pem = base64.b64decode(ca_data)
    except ValueError as exc:
        raise InvalidClusterSecret(
            f"certificate-authority-data in secret {name} is not base64"
        ) from exc
    where = f"certificate-authority-data in secret {name}"
    return CAInfo(_check_pem(pem, where), server)


def endpoint_from_server(server: str) -> str:
    """``host:port`` of a kubeconfig server URL (port 443 when the URL has none)."""
    parts = urlsplit(server if "://" in server else f"https://{server}")
    if not parts.hostname:
        return ""
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{parts.port or 443}"
