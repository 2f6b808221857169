"""Pure token helpers: format, Secret shape, refresh and rotation decisions, CA pins."""

from __future__ import annotations

import base64
import datetime as dt
import re

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from machinepool.bootstrap.kubeadm.certs import (
    InvalidClusterSecret,
    ca_from_ca_secret,
    ca_from_kubeconfig,
    endpoint_from_server,
)
from machinepool.bootstrap.kubeadm.tokens import (
    BootstrapToken,
    expiration_of,
    generate_token,
    needs_refresh,
    needs_rotation,
    parse_token,
    token_secret,
)

TTL = dt.timedelta(minutes=15)
NOW = dt.datetime(2025, 1, 1, 12, 0, tzinfo=dt.UTC)


def test_generated_tokens_match_the_bootstrap_token_format_and_differ() -> None:
    tokens = {str(generate_token()) for _ in range(50)}
    assert len(tokens) == 50
    assert all(re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", t) for t in tokens)


def test_repr_hides_the_secret_half() -> None:
    token = BootstrapToken("abcdef", "0123456789abcdef")
    assert "0123456789abcdef" not in repr(token)
    assert str(token) == "abcdef.0123456789abcdef"
    assert token.secret_name == "bootstrap-token-abcdef"


def test_parse_rejects_malformed_tokens_without_quoting_them() -> None:
    with pytest.raises(ValueError, match="not of the form") as info:
        parse_token("ABCDEF.secretsecretsecret")
    assert "secretsecret" not in str(info.value)
    assert parse_token(" abcdef.0123456789abcdef ") == BootstrapToken("abcdef", "0123456789abcdef")


def test_token_secret_has_the_kubeadm_shape() -> None:
    secret = token_secret(BootstrapToken("abcdef", "0123456789abcdef"), NOW, "ns/cfg", "uid-1")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert secret["metadata"]["name"] == "bootstrap-token-abcdef"
    assert secret["metadata"]["namespace"] == "kube-system"
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    assert data["token-id"] == "abcdef"
    assert data["token-secret"] == "0123456789abcdef"
    assert data["expiration"] == "2025-01-01T12:00:00Z"
    assert data["usage-bootstrap-authentication"] == "true"
    assert data["usage-bootstrap-signing"] == "true"
    assert data["auth-extra-groups"] == "system:bootstrappers:kubeadm:default-node-token"
    assert "ns/cfg" in data["description"]
    assert expiration_of(secret) == NOW


def test_rotation_starts_at_half_the_ttl() -> None:
    assert not needs_rotation(NOW + TTL / 2 + dt.timedelta(seconds=1), TTL, NOW)
    assert needs_rotation(NOW + TTL / 2 - dt.timedelta(seconds=1), TTL, NOW)
    assert needs_rotation(None, TTL, NOW)


def test_refresh_starts_at_five_sixths_of_the_ttl() -> None:
    assert not needs_refresh(NOW + TTL * 5 / 6 + dt.timedelta(seconds=1), TTL, NOW)
    assert needs_refresh(NOW + TTL * 5 / 6, TTL, NOW)
    assert needs_refresh(None, TTL, NOW)


def _ca_pem() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "ca")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(NOW)
        .not_valid_after(NOW + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def _kubeconfig_secret(
    ca: bytes | None, server: str = "https://127.0.0.1:6443"
) -> dict[str, object]:
    cluster: dict[str, str] = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    config = (
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters:\n- name: w\n  cluster: {cluster!r}\n"
        "contexts:\n- name: c\n  context: {cluster: w, user: u}\n"
        "users:\n- name: u\n  user: {token: supersecret}\n"
    )
    return {
        "metadata": {"name": "w-kubeconfig"},
        "data": {"value": base64.b64encode(config.encode()).decode()},
    }


def test_ca_and_server_come_from_the_kubeconfig() -> None:
    pem = _ca_pem()
    info = ca_from_kubeconfig(_kubeconfig_secret(pem))
    assert info.ca_pem == pem
    assert info.server == "https://127.0.0.1:6443"


def test_a_ca_secret_wins_and_the_kubeconfig_may_lack_a_ca() -> None:
    pem = _ca_pem()
    ca_secret = {"metadata": {"name": "w-ca"}, "data": {"tls.crt": base64.b64encode(pem).decode()}}
    info = ca_from_kubeconfig(_kubeconfig_secret(None), ca_from_ca_secret(ca_secret).ca_pem)
    assert info.ca_pem == pem


def test_kubeconfig_without_ca_is_explained_without_leaking_credentials() -> None:
    with pytest.raises(InvalidClusterSecret) as info:
        ca_from_kubeconfig(_kubeconfig_secret(None))
    assert "certificate-authority-data" in str(info.value)
    assert "supersecret" not in str(info.value)


@pytest.mark.parametrize(
    ("server", "endpoint"),
    [
        ("https://127.0.0.1:6443", "127.0.0.1:6443"),
        ("https://api.example.com", "api.example.com:443"),
        ("https://[::1]:6443/", "[::1]:6443"),
        ("api.example.com:8443", "api.example.com:8443"),
        ("", ""),
    ],
)
def test_endpoint_from_server(server: str, endpoint: str) -> None:
    assert endpoint_from_server(server) == endpoint
