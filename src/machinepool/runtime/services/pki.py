"""Throw-away certificates and the CA pin: the one place this project makes or reads them.

- ``new_ca`` / ``issue``: a self-signed CA and leaf certificates signed by it (EC P-256,
  SHA-256), for local control planes (``controlplane``), our HTTPS listeners when no
  certificate is given (``runtime.services.tls.self_signed``) and the upstream webhook in tests.
- ``new_service_account_keys``: the RSA pair a local kube-apiserver signs tokens with.
- ``client_csr``: a new key and a PKCS#10 request for a client certificate, which the node
  simulator sends as a CertificateSigningRequest (a kubelet's TLS bootstrap).
- ``ca_public_key_hash``: kubeadm's discovery pin of a CA (``sha256:`` + hex SHA-256 of its
  SubjectPublicKeyInfo), which the kubeadm bootstrap provider writes into join configuration
  and the node simulator checks.

Why in the runtime: the control plane, the bootstrap provider, the node simulator and the
runtime's own TLS listeners all need it, and the runtime is the lowest layer they all import
(``api`` holds only the API's types). Built on ``cryptography``'s X.509 builder; nothing here
talks to a cluster, and keys are only written where a caller asks.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "KeyPair",
    "ca_public_key_hash",
    "client_csr",
    "issue",
    "new_ca",
    "new_service_account_keys",
]

_LEAF_VALIDITY = dt.timedelta(days=365)
_CA_VALIDITY = _LEAF_VALIDITY * 10
_CLOCK_SKEW = dt.timedelta(minutes=5)
"""Certificates start this long before now, so a peer whose clock lags still accepts them."""


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        """Write ``<stem>.crt`` and ``<stem>.key`` (mode 0600) and return their paths."""
        crt, key = directory / f"{stem}.crt", directory / f"{stem}.key"
        crt.write_bytes(self.cert_pem)
        key.touch(mode=0o600)
        key.chmod(0o600)
        key.write_bytes(self.key_pem)
        return crt, key


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def new_ca(common_name: str) -> KeyPair:
    """A self-signed CA certificate, valid for ten years, that signs leaf certificates only."""
    key = _key()
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + _CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue(
    ca: KeyPair,
    common_name: str,
    *,
    organization: str | None = None,
    dns_names: tuple[str, ...] = (),
    ip_addresses: tuple[str, ...] = (),
    server: bool = False,
) -> KeyPair:
    """A leaf certificate signed by ``ca``, valid for a year: for serving when ``server``,
    else for client authentication (``organization`` is then the Kubernetes group).

    >>> ca = new_ca("test-ca")
    >>> serving = issue(ca, "localhost", dns_names=("localhost",), server=True)
    """
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = _key()
    now = dt.datetime.now(dt.UTC)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organization))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + _LEAF_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def client_csr(common_name: str, organization: str | None = None) -> tuple[bytes, bytes]:
    """A new EC P-256 key and a certificate signing request for it, subject ``common_name``
    (and ``organization``, the Kubernetes group), no extensions: what a kubelet asks the
    ``kubernetes.io/kube-apiserver-client-kubelet`` signer for. Returns the PEM request and
    the PEM key; the key stays with the caller.

    >>> request, key = client_csr("system:node:n1", "system:nodes")
    """
    key = _key()
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(_name(common_name, organization))
        .sign(key, hashes.SHA256())
    )
    return request.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def new_service_account_keys(directory: Path) -> tuple[Path, Path]:
    """Write the RSA key pair that signs ServiceAccount tokens: ``sa.key`` and ``sa.pub``."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private, public = directory / "sa.key", directory / "sa.pub"
    private.touch(mode=0o600)
    private.chmod(0o600)
    private.write_bytes(_key_pem(key))
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


def ca_public_key_hash(ca_cert_pem: bytes) -> str:
    """kubeadm's discovery pin of a CA: ``sha256:`` + hex SHA-256 of its SubjectPublicKeyInfo.

    Raises ``ValueError`` when ``ca_cert_pem`` is not a PEM certificate.
    """
    cert = x509.load_pem_x509_certificate(ca_cert_pem)
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return "sha256:" + hashlib.sha256(spki).hexdigest()
