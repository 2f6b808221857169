"""TLS for our HTTPS listeners (webhooks, secure diagnostics): serving certificates that
follow their files, and throw-away self-signed ones when none are given.

``CertReloader`` owns an ``ssl.SSLContext`` loaded from ``tls.crt``/``tls.key`` and polls the
files: when cert-manager rotates the Secret (the kubelet swaps the mounted files), the new
pair is loaded into the same context, so new connections get the new certificate without a
restart and connections already open keep theirs. A half-written pair (new certificate, old
key) is not loaded; the old one keeps serving until the pair matches.

``self_signed(directory)`` makes a CA and a serving certificate for 127.0.0.1 / localhost
(plus any extra names), valid for a year, with ``runtime.services.pki``. The CA certificate is the
``caBundle`` a client is told to trust; the CA key is never written anywhere.
``webhooks.serve()`` and the manager's secure diagnostics listener use both.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import shutil
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from machinepool.runtime.services import pki
from machinepool.runtime.telemetry.logging import KVLogger, get_logger


@dataclass(frozen=True)
class ServingCert:
    """Files the TLS listener loads, and the CA bundle clients must trust."""

    cert_file: Path
    key_file: Path
    ca_bundle: bytes


def self_signed(directory: Path, hosts: tuple[str, ...] = ()) -> ServingCert:
    """A fresh CA and a serving cert for 127.0.0.1, ::1, localhost and ``hosts``."""
    ca = pki.new_ca("machinepool-webhook-ca")
    dns, ips = ["localhost"], []
    for host in ("127.0.0.1", "::1", *hosts):
        try:
            ipaddress.ip_address(host)
        except ValueError:
            dns.append(host)
        else:
            ips.append(host)
    serving = pki.issue(
        ca, "machinepool-webhook", dns_names=tuple(dns), ip_addresses=tuple(ips), server=True
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = serving.write(directory, "tls")
    return ServingCert(cert_file, key_file, ca.cert_pem)


def server_context() -> ssl.SSLContext:
    """A server-side context as our listeners use it: TLS 1.2 or newer, no client certs."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class CertReloader:
    """A server ``SSLContext`` that follows ``cert_file`` and ``key_file`` on disk.

    ``interval`` [1 s]: how often the files are read and compared (two small reads; an
    inotify watch would miss the kubelet's symlink swap of a mounted Secret anyway).
    ``reloads`` counts certificates loaded after the first, ``rejected`` changed pairs it
    would not load.

    >>> certs = CertReloader(Path("tls.crt"), Path("tls.key"))   # raises if the pair is bad
    >>> await certs.start()
    >>> site = web.TCPSite(runner, host, port, ssl_context=certs.context)
    """

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        *,
        interval: float = 1.0,
        logger: KVLogger | None = None,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.interval = interval
        self.context = server_context()
        self.reloads = 0
        self.rejected = 0
        """Changed pairs not loaded (half-written, mismatched, unreadable as PEM)."""
        self.log = (logger or get_logger(__name__)).bind(cert=str(cert_file))
        self._digest = ""
        self._task: asyncio.Task[None] | None = None
        if not self.check():
            raise ValueError(f"cannot load the serving certificate {cert_file} / {key_file}")

    def check(self) -> bool:
        """Load the pair if it changed and is consistent; True when the context holds a pair
        loaded from the files' current content (whether just now or before)."""
        try:
            cert, key = self.cert_file.read_bytes(), self.key_file.read_bytes()
        except OSError as exc:
            self.log.warning("cannot read the serving certificate", error=str(exc))
            return bool(self._digest)
        digest = hashlib.sha256(cert + b"\0" + key).hexdigest()
        if digest == self._digest:
            return True
        try:
            _load_pair(self.context, cert, key)
        except (ssl.SSLError, ValueError) as exc:
            # Mid-rotation (the certificate written, the key not yet) or garbage: keep serving
            # the pair we have and look again next time.
            self.rejected += 1
            self.log.warning("serving certificate not loaded; keeping the old one", error=str(exc))
            return False
        first = not self._digest
        self._digest = digest
        if not first:
            self.reloads += 1
            self.log.info("serving certificate reloaded", serial=_serial(cert))
        return True

    async def start(self) -> None:
        """Poll the files in the background until ``stop``."""
        if self._task is None:
            self._task = asyncio.create_task(self._poll(), name=f"certs-{self.cert_file.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.check()


def _load_pair(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """Load ``cert``/``key`` into ``context`` only if they belong together.

    ``SSLContext.load_cert_chain`` reads files, and a mismatched pair would leave the live
    context without a certificate: so the bytes we read go to a private folder, are tried on
    a scratch context first, and then loaded into the live one from the same snapshot.
    """
    folder = Path(tempfile.mkdtemp(prefix="machinepool-tls-"))
    try:
        cert_path, key_path = folder / "tls.crt", folder / "tls.key"
        cert_path.write_bytes(cert)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        server_context().load_cert_chain(cert_path, key_path)
        context.load_cert_chain(cert_path, key_path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _serial(cert: bytes) -> str:
    try:
        return format(x509.load_pem_x509_certificate(cert).serial_number, "x")
    except ValueError:
        return "?"
