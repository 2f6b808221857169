"""An auditing, partitionable front for the management kube-apiserver.

Each controller replica in the leader-election tests talks to the apiserver through its own
``AuditProxy``: plain HTTP on loopback in, HTTPS with the admin client certificate out. The
proxy records every request it forwards (when it started and ended, verb, path, status), so
the test can prove that two replicas never wrote at the same time without trusting the
replicas' own logs; and it can cut its replica off (``partition``), breaking open watches and
answering 503, as a network partition between one replica and the apiserver would. With
``watch_delays`` it serves the watches of chosen paths late (every event, in order, that many
seconds after the apiserver sent it), as a loaded apiserver, or an informer re-listing
through 429s, leaves one kind's cache behind the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_HOP_HEADERS = frozenset(
    {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "upgrade"}
)


@dataclass(frozen=True)
class Request:
    replica: str
    incarnation: int
    method: str
    path: str
    status: int
    started: float
    ended: float
    query: str = ""
    body: bytes = b""

    @property
    def is_write(self) -> bool:
        return self.method in WRITE_VERBS

    @property
    def is_lease(self) -> bool:
        return "/apis/coordination.k8s.io/" in self.path


@dataclass
class AuditProxy:
    replica: str
    upstream: str
    ssl_context: ssl.SSLContext
    log: list[Request]
    incarnation: int = 0
    partitioned: bool = False
    watch_delays: dict[str, float] = field(default_factory=dict)
    """Seconds by which a watch whose path contains the key is served late."""
    port: int = 0
    _runner: web.AppRunner | None = None
    _session: aiohttp.ClientSession | None = None
    _streams: set[asyncio.Task[Any]] = field(default_factory=set)

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.ssl_context, limit=0),
            auto_decompress=False,
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig that reaches the apiserver only through this proxy."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "proxy", "user": {}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}],
            "current-context": "proxy",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def partition(self) -> None:
        """Cut the replica off: open requests (watches) break, new ones get 503."""
        self.partitioned = True
        for task in list(self._streams):
            task.cancel()

    def heal(self) -> None:
        """Reconnect; what the replica writes from now on is a new leadership term."""
        self.partitioned = False
        self.incarnation += 1

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if self.partitioned:
            return web.Response(status=503, text="partitioned by the test")
        task = asyncio.current_task()
        assert task is not None
        assert self._session is not None
        self._streams.add(task)
        started, incarnation = time.monotonic(), self.incarnation
        status = 0
        body = b""
        try:
            body = await request.read()
            headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
            async with self._session.request(
                request.method,
                self.upstream + request.path_qs,
                headers=headers,
                data=body or None,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            ) as upstream:
                status = upstream.status
                response = web.StreamResponse(status=upstream.status)
                for key, value in upstream.headers.items():
                    if key.lower() not in _HOP_HEADERS:
                        response.headers[key] = value
                await response.prepare(request)
                # The replica may be killed mid-stream: its side of a watch just goes away.
                with contextlib.suppress(ConnectionResetError, aiohttp.ClientConnectionResetError):
                    await _relay(upstream.content, response, self._delay(request))
                    await response.write_eof()
                return response
        finally:
            self._streams.discard(task)
            if status:
                self.log.append(
                    Request(
                        self.replica,
                        incarnation,
                        request.method,
                        request.path,
                        status,
                        started,
                        time.monotonic(),
                        request.query_string,
                        body if request.method in WRITE_VERBS else b"",
                    )
                )

    def _delay(self, request: web.Request) -> float:
        if request.query.get("watch") not in ("1", "true"):
            return 0.0
        return max((d for part, d in self.watch_delays.items() if part in request.path), default=0)


async def _relay(content: aiohttp.StreamReader, response: web.StreamResponse, delay: float) -> None:
    """Copy the upstream body to the replica, each chunk ``delay`` seconds after it came."""
    if not delay:
        async for chunk in content.iter_any():
            await response.write(chunk)
        return
    due: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        try:
            async for chunk in content.iter_any():
                due.put_nowait((time.monotonic() + delay, chunk))
        finally:  # the end of the stream, or its breaking, is passed on late too
            due.put_nowait((time.monotonic() + delay, b""))

    reader = asyncio.create_task(read())
    try:
        while True:
            at, chunk = await due.get()
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            if not chunk:
                break
            await response.write(chunk)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


def overlapping_writers(log: list[Request]) -> list[str]:
    """Pairs of replica terms whose spans of successful non-Lease writes overlap.

    A term is one incarnation of a replica (a restart or a healed partition starts a new
    one); its span runs from its first accepted write to its last. Leader election promises
    these spans are disjoint (Lease writes are how candidates compete, so they are left
    out)."""
    spans: dict[tuple[str, int], tuple[float, float]] = {}
    for req in log:
        if not req.is_write or req.is_lease or req.status >= 400:
            continue
        key = (req.replica, req.incarnation)
        first, last = spans.get(key, (req.started, req.ended))
        spans[key] = (min(first, req.started), max(last, req.ended))
    ordered = sorted(spans.items(), key=lambda kv: kv[1][0])
    problems = []
    for (a, (_a0, a1)), (b, (b0, _b1)) in itertools.pairwise(ordered):
        if b0 < a1:
            problems.append(f"{a[0]}#{a[1]} wrote until {a1:.2f}, {b[0]}#{b[1]} from {b0:.2f}")
    return problems
