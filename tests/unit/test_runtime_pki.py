"""The one PKI module: CAs, leaf certificates, the self-signed serving pair and the CA pin."""

from __future__ import annotations

import hashlib
import ipaddress
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from machinepool.runtime import pki, self_signed


def _cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def test_a_leaf_is_signed_by_its_ca_and_carries_its_names_and_usage() -> None:
    ca = pki.new_ca("test-ca")
    leaf = pki.issue(ca, "api", dns_names=("localhost",), ip_addresses=("127.0.0.1",), server=True)

    ca_cert, cert = _cert(ca.cert_pem), _cert(leaf.cert_pem)
    cert.verify_directly_issued_by(ca_cert)
    assert ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]


def test_a_client_certificate_names_its_group() -> None:
    ca = pki.new_ca("test-ca")
    cert = _cert(pki.issue(ca, "admin", organization="system:masters").cert_pem)

    org = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [a.value for a in org] == ["system:masters"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_written_keys_are_private(tmp_path: Path) -> None:
    _, key = pki.new_ca("test-ca").write(tmp_path, "ca")
    private, _ = pki.new_service_account_keys(tmp_path)

    assert key.stat().st_mode & 0o777 == 0o600
    assert private.stat().st_mode & 0o777 == 0o600


def test_the_ca_pin_is_sha256_of_the_subject_public_key_info() -> None:
    ca = pki.new_ca("test-ca")
    spki = (
        _cert(ca.cert_pem)
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )

    assert pki.ca_public_key_hash(ca.cert_pem) == "sha256:" + hashlib.sha256(spki).hexdigest()


def test_self_signed_serves_loopback_and_the_extra_hosts(tmp_path: Path) -> None:
    serving = self_signed(tmp_path, ("webhook.example", "10.1.2.3"))

    cert = _cert(serving.cert_file.read_bytes())
    cert.verify_directly_issued_by(_cert(serving.ca_bundle))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == {"localhost", "webhook.example"}
    assert set(sans.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address(a) for a in ("127.0.0.1", "::1", "10.1.2.3")
    }
    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
        serving.cert_file, serving.key_file
    )


def test_a_client_csr_names_its_subject_and_is_signed_by_its_key() -> None:
    request_pem, key_pem = pki.client_csr("system:node:n1", "system:nodes")

    request = x509.load_pem_x509_csr(request_pem)
    assert request.is_signature_valid
    assert request.subject.rfc4514_string() == "O=system:nodes,CN=system:node:n1"
    assert len(request.extensions) == 0  # no names: the kubelet client signer refuses SANs
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert key.public_key() == request.public_key()
