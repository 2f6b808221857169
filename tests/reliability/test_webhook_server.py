"""The webhook server under hostile input and under certificate rotation.

- A hypothesis-generated barrage of raw HTTP requests over TLS (``--reliability-scale``
  times ``REQUESTS_PER_SCALE``): wrong methods and content types, random bytes, truncated and
  too deeply nested JSON, bodies over the size bound (announced or chunked), reviews without
  a request, and bodies cut short with the connection closed. Every request that gets an
  answer gets a review (200) only for a readable review and otherwise a clear 4xx ``Status``
  naming the problem; never a 5xx, and the server keeps admitting afterwards.
- The serving certificate rotated the way cert-manager and the kubelet do it (a new leaf from
  the same CA, swapped in through the ``..data`` symlink of a mounted Secret), three times,
  while the real apiserver keeps sending admission requests through our registered
  webhooks: every admission succeeds, and the server presents each new certificate without
  a restart. A half-written pair (new certificate, old key) is not loaded meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import json
import os
import ssl
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest_asyncio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from tests.reliability.report import Recorder
from tests.support.builders import machine_pool
from tests.support.resources import MACHINE_POOLS

from machinepool.api.features import FeatureGates
from machinepool.runtime import ApiError, Client
from machinepool.webhooks import (
    CONVERT_PATH,
    MUTATE_PATH,
    VALIDATE_PATH,
    WebhookServer,
    register,
    serve,
)
from machinepool.webhooks import unregister as unregister_webhooks
from machinepool.webhooks.server import MAX_ADMISSION_BYTES

REQUESTS_PER_SCALE = 300
PATHS = (MUTATE_PATH, VALIDATE_PATH, CONVERT_PATH)
ROTATIONS = 3
LABEL = "reliability.machinepool.test/rotation"


# -- the barrage ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Shot:
    """One raw request: what is sent, and whether the connection is cut before the end."""

    method: str
    path: str
    content_type: str | None
    body: bytes
    announced: int | None = None
    """Content-Length sent (None: the body's length; larger: the body is cut short)."""
    chunked: bool = False

    @property
    def readable_review(self) -> bool:
        """Whether the body is a review the gate lets through."""
        if self.method != "POST" or self.content_type not in ("application/json",) or self.cut:
            return False
        if len(self.body) > MAX_ADMISSION_BYTES:
            return False
        try:
            doc = json.loads(self.body)
        except (ValueError, RecursionError):
            return False
        return isinstance(doc, dict) and isinstance(doc.get("request"), dict)

    @property
    def cut(self) -> bool:
        return self.announced is not None and self.announced > len(self.body)

    def raw(self) -> bytes:
        head = [f"{self.method} {self.path} HTTP/1.1", "Host: webhook", "Connection: close"]
        if self.content_type is not None:
            head.append(f"Content-Type: {self.content_type}")
        if self.chunked:
            head.append("Transfer-Encoding: chunked")
            body = b"".join(
                f"{len(part):x}\r\n".encode() + part + b"\r\n"
                for part in (self.body[i : i + 65536] for i in range(0, len(self.body), 65536))
            )
            body += b"0\r\n\r\n"
        else:
            length = self.announced if self.announced is not None else len(self.body)
            head.append(f"Content-Length: {length}")
            body = self.body
        return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _review(path: str) -> dict[str, object]:
    if path == CONVERT_PATH:
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {
                "uid": "c1",
                "desiredAPIVersion": "cluster.x-k8s.io/v1beta1",
                "objects": [
                    machine_pool("ns", "p", replicas=1) | {"apiVersion": "cluster.x-k8s.io/v1beta2"}
                ],
            },
        }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "a1",
            "operation": "CREATE",
            "object": machine_pool("ns", "p", replicas=1),
        },
    }


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def shots(draw: st.DrawFn) -> Shot:
    path = draw(st.sampled_from(PATHS))
    method = draw(st.sampled_from(["POST"] * 8 + ["GET", "PUT", "DELETE"]))
    content_type = draw(
        st.sampled_from(
            ["application/json"] * 6
            + [None, "text/plain", "application/x-www-form-urlencoded", "application/yaml"]
        )
    )
    valid = json.dumps(_review(path)).encode()
    body = draw(
        st.one_of(
            st.just(valid),
            st.binary(max_size=200),
            st.integers(1, len(valid) - 1).map(lambda n: valid[:n]),  # truncated JSON
            st.integers(1, 20_000).map(lambda n: b"[" * n + b"]" * n),  # deep nesting
            json_values.map(lambda v: json.dumps(v).encode()),  # JSON, not a review
            json_values.map(lambda v: json.dumps({"request": v}).encode()),
            st.just(b'{"request": {"uid": "x"}, "pad": "' + b"x" * MAX_ADMISSION_BYTES + b'"}'),
        )
    )
    announced = draw(st.sampled_from([None] * 6 + [len(body) + 10]))
    chunked = announced is None and draw(st.sampled_from([False] * 4 + [True]))
    return Shot(method, path, content_type, body, announced, chunked)


def generate(count: int) -> list[Shot]:
    found: list[Shot] = []

    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(shots())
    def collect(shot: Shot) -> None:
        found.append(shot)

    collect()
    return found


def _client_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def fire(port: int, shot: Shot) -> tuple[int | None, bytes]:
    """Send one raw request; (status, body), or (None, b"") when no answer came."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=_client_tls())
    try:
        writer.write(shot.raw())
        await writer.drain()
        if shot.cut:
            return None, b""  # the client gives up mid-body: nothing to read
        async with asyncio.timeout(30):
            data = await reader.read()
    except (ConnectionError, ssl.SSLError):
        return None, b""  # the server may close on us after a 413 before we finish
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    return (int(status_line[1]) if len(status_line) > 1 else None), body


async def test_raw_http_barrage_gets_clear_answers_and_no_crash(
    scale: int, report: Recorder
) -> None:
    server = await serve(port=0, gates=FeatureGates.parse("MachinePool=true"))
    port = int(server.url.rsplit(":", 1)[1])
    statuses: Counter[int | None] = Counter()
    problems: list[str] = []
    try:
        for shot in generate(REQUESTS_PER_SCALE * scale):
            status, body = await fire(port, shot)
            statuses[status] += 1
            what = f"{shot.method} {shot.path} {shot.content_type} {shot.body[:40]!r}"
            if status is None:
                if not shot.cut and len(shot.body) <= MAX_ADMISSION_BYTES:
                    problems.append(f"no answer to {what}")
                continue
            if status >= 500:
                problems.append(f"{status} for {what}: {body[:200]!r}")
            elif shot.readable_review and shot.path in (MUTATE_PATH, VALIDATE_PATH):
                if status != 200 or b'"AdmissionReview"' not in body:
                    problems.append(f"{status} for a readable review {what}")
            elif shot.method == "POST" and not shot.readable_review and shot.path != CONVERT_PATH:
                answer = json.loads(body) if status in (400, 413, 415) else {}
                if status not in (400, 413, 415) or not answer.get("message"):
                    problems.append(f"{status} without a clear refusal for {what}: {body[:200]!r}")
            elif shot.method != "POST" and status != 405:
                problems.append(f"{status} for {shot.method} {shot.path}")
        # Still serving: a real review is admitted.
        review = json.dumps(_review(VALIDATE_PATH)).encode()
        ok, body = await fire(port, Shot("POST", VALIDATE_PATH, "application/json", review))
        assert ok == 200, body
        assert json.loads(body)["response"]["allowed"] is True
    finally:
        await server.stop()
    print(f"\nwebhook barrage: {sum(statuses.values())} raw requests, answers {dict(statuses)}")
    report.record("raw requests", sum(statuses.values()))
    report.record(
        "answers by status", ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items(), key=str))
    )
    assert problems == []
    for status in (400, 405, 413, 415):
        assert statuses[status] > 0, f"the barrage never drew a {status}: {dict(statuses)}"


# -- certificate rotation under load ------------------------------------------------------------


@dataclass
class CA:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def new(cls) -> CA:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rotation-ca")])
        now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    def issue(self) -> tuple[bytes, bytes, int]:
        """A fresh serving certificate for 127.0.0.1: (cert PEM, key PEM, serial)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        serial = x509.random_serial_number()
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "webhook")]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(now)
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return cert.public_bytes(serialization.Encoding.PEM), key_pem, serial

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


class MountedSecret:
    """A folder laid out as the kubelet mounts a Secret: tls.crt -> ..data/tls.crt, and an
    update swaps the ..data symlink to a new timestamped folder in one rename."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.versions = 0

    def write(self, files: dict[str, bytes]) -> None:
        self.versions += 1
        version = self.root / f"..v{self.versions}"
        version.mkdir()
        for name, content in files.items():
            (version / name).write_bytes(content)
        link = self.root / "..data_tmp"
        link.symlink_to(version.name)
        os.replace(link, self.root / "..data")
        for name in files:
            target = self.root / name
            if not target.is_symlink():
                target.symlink_to(Path("..data") / name)


async def presented_serial(port: int) -> int:
    """The serial of the certificate a fresh TLS handshake gets."""
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=_client_tls())
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def until_presented(port: int, serial: int) -> None:
    """Until a new handshake gets ``serial`` (the reloader polls its files each second)."""
    async with asyncio.timeout(30):
        while True:
            if await presented_serial(port) == serial:
                return
            await asyncio.sleep(0.2)


@pytest_asyncio.fixture(loop_scope="session")
async def rotating(
    client: Client, crds: list[str], tmp_path: Path
) -> AsyncIterator[tuple[WebhookServer, CA, MountedSecret, str]]:
    _ = crds
    ca = CA.new()
    mount = MountedSecret(tmp_path / "serving-certs")
    cert, key, _ = ca.issue()
    mount.write({"tls.crt": cert, "tls.key": key})
    server = await serve(
        port=0,
        gates=FeatureGates.parse("MachinePool=true"),
        client=client,
        cert_file=mount.root / "tls.crt",
        key_file=mount.root / "tls.key",
    )
    value = uuid.uuid4().hex[:8]
    config = f"reliability-rotation-{value}"
    await register(
        client,
        server.url,
        ca.pem,
        config_name=config,
        object_selector={LABEL: value},
        conversion=False,
    )
    try:
        yield server, ca, mount, value
    finally:
        await unregister_webhooks(client, config_name=config)
        await server.stop()


async def test_serving_certificate_rotates_under_admission_load(
    client: Client,
    namespace: str,
    rotating: tuple[WebhookServer, CA, MountedSecret, str],
    report: Recorder,
) -> None:
    server, ca, mount, value = rotating
    assert server.certs is not None
    certs = server.certs
    port = int(server.url.rsplit(":", 1)[1])
    admitted: list[int] = []
    failed: list[str] = []
    stop = asyncio.Event()
    progress = asyncio.Event()

    async def load() -> None:
        """Dry-run creates through the apiserver, which calls our webhooks each time."""
        n = 0
        while not stop.is_set():
            n += 1
            body = machine_pool(namespace, f"rot-{n}", replicas=1, labels={LABEL: value})
            try:
                created = await client.create(MACHINE_POOLS, body, namespace, dry_run=True)
            except ApiError as err:
                failed.append(err.message)
                continue
            # Proof the webhooks ran: the defaulting webhook sets the cluster-name label.
            if (created["metadata"].get("labels") or {}).get("cluster.x-k8s.io/cluster-name"):
                admitted.append(n)
                progress.set()
            else:
                failed.append(f"rot-{n} admitted without our defaulting webhook")

    async def admitted_more(than: int) -> None:
        async with asyncio.timeout(60):
            while len(admitted) <= than + 5:
                progress.clear()
                await progress.wait()

    workers = [asyncio.create_task(load()) for _ in range(4)]
    try:
        await admitted_more(0)
        for _ in range(ROTATIONS):
            cert, key, serial = ca.issue()
            # Half-written first (the new certificate with the old key): not loaded.
            old_key = (mount.root / "tls.key").read_bytes()
            rejected = certs.rejected
            mount.write({"tls.crt": cert, "tls.key": old_key})
            async with asyncio.timeout(30):
                while True:  # until the reloader looked at the bad pair ...
                    if certs.rejected > rejected:
                        break
                    await asyncio.sleep(0.1)
            assert await presented_serial(port) != serial  # ... and kept the old one
            await admitted_more(len(admitted))
            mount.write({"tls.crt": cert, "tls.key": key})
            await until_presented(port, serial)
            await admitted_more(len(admitted))
    finally:
        stop.set()
        await asyncio.gather(*workers, return_exceptions=True)
    print(
        f"\ncertificate rotation: {ROTATIONS} rotations, {len(admitted)} admissions,"
        f" {len(failed)} failed, {certs.reloads} reloads, {certs.rejected} half-written pairs"
        " refused"
    )
    report.record("rotations", ROTATIONS)
    report.record("admissions (failed)", f"{len(admitted)} ({len(failed)})")
    report.record("reloads", certs.reloads)
    report.record("half-written pairs refused", certs.rejected)
    assert failed == []
    assert certs.reloads == ROTATIONS
