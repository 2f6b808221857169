"""The manager: one process's controllers, informer cache, leader election, probes and metrics.

The CLI builds one ``Manager`` per process; controller packages register on it::

    mgr = Manager(client, leader_election=LeaderElectionConfig("machinepool", "capi-system"))
    pools = await mgr.cache.get_informer(MACHINE_POOLS)          # before or after start
    ctrl = mgr.new_controller("machinepool", reconciler, concurrency=10)
    ctrl.watch(pools)
    await mgr.run()                                              # until SIGTERM / SIGINT

Order of events: the HTTP servers start (``/healthz``, ``/readyz``, ``/metrics``); informers
start and the manager waits for their first list; then it campaigns for the Lease and runs the
controllers only while it leads. Losing the Lease cancels every controller at once (a key being
reconciled is re-queued) and the manager campaigns again. ``stop`` (or SIGTERM in ``run``)
stops controllers, releases the Lease, stops informers and the server, in that order.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import signal
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from machinepool.runtime.kube.client import Client
from machinepool.runtime.kube.events import EventRecorder
from machinepool.runtime.kube.informer import (
    CacheScope,
    InformerCache,
    Transform,
    strip_managed_fields,
)
from machinepool.runtime.reconcile.controller import Controller, ReconcileFunc, Reconciler
from machinepool.runtime.reconcile.sharding import Handover
from machinepool.runtime.reconcile.workqueue import RateLimiter
from machinepool.runtime.services.diagnostics import SecureServing, TokenAuthorizer
from machinepool.runtime.services.leaderelection import LeaderElectionConfig, LeaderElector
from machinepool.runtime.services.tls import CertReloader, self_signed
from machinepool.runtime.telemetry.logging import KVLogger, get_logger
from machinepool.runtime.telemetry.metrics import MANAGEMENT, RuntimeMetrics

HealthCheck = Callable[[], bool]


class ManagerState(enum.Enum):
    """NEW -> STARTING -> RUNNING -> STOPPING -> STOPPED; a manager runs once."""

    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


class ManagerStateError(RuntimeError):
    """An operation the manager's current state does not allow (e.g. starting it twice)."""


class Manager:
    """Runs controllers (while leading), the informer cache, probes and metrics.

    ``leader_election``: ``None`` runs controllers as soon as caches sync (one replica, tests).
    ``bind_address``: ``"host:port"`` of the diagnostics server, ``/metrics`` and the probes
    (port 0 picks a free port, see ``http_port``); ``None`` runs no server. ``secure``: serve it
    over HTTPS with ``/metrics`` only for callers the API server authenticates and authorizes
    (``runtime.services.diagnostics``); ``None`` [default]: plain HTTP, for local runs.
    ``health_bind_address``: a separate plain-HTTP listener for ``/healthz`` and ``/readyz``
    only (see ``health_port``), which the kubelet can probe without credentials.
    ``cache_sync_timeout`` [120 s]: how long ``start`` waits for the informers' first list
    before failing. ``scope``: which objects the informer cache holds (namespaces, a label
    selector; default everything). ``handover``: a sharded manager's, given to every
    controller it builds (``runtime.reconcile.sharding``).
    """

    def __init__(
        self,
        client: Client,
        *,
        name: str = "machinepool",
        leader_election: LeaderElectionConfig | None = None,
        bind_address: str | None = "127.0.0.1:8081",
        secure: SecureServing | None = None,
        health_bind_address: str | None = None,
        cache_sync_timeout: float = 120.0,
        transform: Transform | None = strip_managed_fields,
        scope: CacheScope | None = None,
        handover: Handover | None = None,
        metrics: RuntimeMetrics | None = None,
        logger: KVLogger | None = None,
    ) -> None:
        self.client = client
        self.name = name
        self.metrics = metrics or RuntimeMetrics()
        self.log = (logger or get_logger(__name__)).bind(manager=name)
        self.cache = InformerCache(client, transform=transform, scope=scope, logger=self.log)
        self.metrics.add_informer_source(lambda: self.cache.sizes(MANAGEMENT))
        self.handover = handover
        self._election = leader_election
        self._elector: LeaderElector | None = None
        self._bind_address = bind_address
        self._secure = secure
        self._health_bind_address = health_bind_address
        self.authorizer: TokenAuthorizer | None = None
        """Who may read ``/metrics`` when serving securely (set by ``start``)."""
        self.certs: CertReloader | None = None
        self._runners: dict[str, web.AppRunner] = {}
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._cache_sync_timeout = cache_sync_timeout
        self._controllers: list[Controller] = []
        self._recorders: list[EventRecorder] = []
        self._controller_tasks: dict[str, asyncio.Task[None]] = {}
        self._leading = asyncio.Event()
        self._lead_task: asyncio.Task[None] | None = None
        self._stop_requested = asyncio.Event()
        self._remove_hook: Callable[[], None] | None = None
        self._healthz: dict[str, HealthCheck] = {}
        self._readyz: dict[str, HealthCheck] = {"informers": lambda: self.cache.has_synced}
        self._before_leading: list[Callable[[], Awaitable[None]]] = []
        self._on_stop: list[Callable[[], Awaitable[None]]] = []
        self._gate_task: asyncio.Task[None] | None = None
        self._fatal: Exception | None = None
        self.state = ManagerState.NEW

    # -- building -----------------------------------------------------------------------

    def new_controller(
        self,
        name: str,
        reconcile: ReconcileFunc | Reconciler,
        *,
        concurrency: int = 1,
        rate_limiter: RateLimiter[Any] | None = None,
    ) -> Controller:
        """Create a controller on this manager's metrics and register it."""
        ctrl = Controller(
            name,
            reconcile,
            concurrency=concurrency,
            rate_limiter=rate_limiter,
            metrics=self.metrics,
            handover=self.handover,
            logger=self.log,
        )
        self.add_controller(ctrl)
        return ctrl

    def add_controller(self, ctrl: Controller) -> None:
        """Register ``ctrl``; if the manager already leads, it starts at once."""
        if any(c.name == ctrl.name for c in self._controllers):
            raise ValueError(f"manager {self.name} already has a controller named {ctrl.name!r}")
        if self.state in (ManagerState.STOPPING, ManagerState.STOPPED):
            raise ManagerStateError(f"cannot add controller {ctrl.name}: manager is {self.state}")
        self._controllers.append(ctrl)
        if self._leading.is_set():
            self._start_controller(ctrl)

    def event_recorder(self, component: str) -> EventRecorder:
        """An ``EventRecorder`` reporting as ``component`` through this manager's client."""
        recorder = EventRecorder(self.client, component, logger=self.log)
        self._recorders.append(recorder)
        return recorder

    def before_leading(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Await ``hook`` each time this manager gains the Lease, before any controller runs.

        For a step that must hold before reconciling and that only the leader may take (the
        take-over of upstream's MachinePool webhooks, ``--beside-upstream``): the process is
        serving probes and webhooks by then. An exception stops the manager, and ``run``
        raises it.
        """
        self._before_leading.append(hook)

    def on_stop(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Await ``hook`` when the manager stops, once its controllers have: for what a
        component must close (clients of its own). Its exceptions are logged, not raised."""
        self._on_stop.append(hook)

    # -- observing ----------------------------------------------------------------------

    @property
    def controllers(self) -> list[Controller]:
        return list(self._controllers)

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    async def wait_leading(self) -> None:
        """Wait until this manager leads (bound it with ``asyncio.timeout``)."""
        await self._leading.wait()

    @property
    def http_port(self) -> int | None:
        """The port the diagnostics server listens on (useful with port 0)."""
        return self._port("diagnostics")

    @property
    def health_port(self) -> int | None:
        """The port of the separate probe listener, if one was asked for."""
        return self._port("health")

    def _port(self, listener: str) -> int | None:
        runner = self._runners.get(listener)
        for addr in runner.addresses if runner is not None else ():
            if isinstance(addr, tuple):
                return int(addr[1])
        return None

    # -- lifecycle ----------------------------------------------------------------------

    def _transition(self, allowed: tuple[ManagerState, ...], to: ManagerState, op: str) -> None:
        if self.state not in allowed:
            raise ManagerStateError(
                f"cannot {op} manager {self.name}: it is {self.state.value}"
                f" (allowed from {', '.join(s.value for s in allowed)})"
            )
        self.state = to

    async def start(self) -> None:
        """Start serving, sync informers, then campaign and run controllers in the background.

        Raises ``ManagerStateError`` unless the manager is new, and ``TimeoutError`` when the
        caches do not sync within ``cache_sync_timeout``.
        """
        self._transition((ManagerState.NEW,), ManagerState.STARTING, "start")
        self._remove_hook = self.client.add_request_hook(self.metrics.on_request)
        self.metrics.state.bind(asyncio.get_running_loop())
        if self._election is not None:
            self.metrics.leader.labels(self._election.name).set(0)
        try:
            await self._start_server()
            await self.cache.start()
            async with asyncio.timeout(self._cache_sync_timeout):
                await self.cache.wait_synced()
        except BaseException:
            self.state = ManagerState.RUNNING
            await self.stop()
            raise
        self._lead_task = asyncio.create_task(self._lead(), name=f"{self.name}-leader")
        self.state = ManagerState.RUNNING
        self.log.info("manager started")

    async def run(self) -> None:
        """Start, then run until SIGTERM/SIGINT or ``request_stop``; always stop cleanly."""
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT)
        await self.start()
        for sig in signals:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
        try:
            await self._stop_requested.wait()
        finally:
            for sig in signals:
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)
            await self.stop()
        if self._fatal is not None:
            raise self._fatal

    def request_stop(self) -> None:
        """Ask ``run`` to shut down gracefully (what SIGTERM does)."""
        self._stop_requested.set()

    async def stop(self) -> None:
        """Stop controllers, release the Lease, stop informers and the server. Idempotent."""
        if self.state in (ManagerState.STOPPING, ManagerState.STOPPED):
            return
        self._transition((ManagerState.RUNNING,), ManagerState.STOPPING, "stop")
        self.log.info("manager stopping")
        for task in (self._lead_task, self._gate_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self._stop_controllers()
        for hook in self._on_stop:
            try:
                await hook()
            except Exception as exc:  # a hook must not keep the manager from stopping
                self.log.error("stop hook failed", error=str(exc))
        for recorder in self._recorders:
            await recorder.close()
        if self._elector is not None and self._election and self._election.release_on_cancel:
            await self._elector.release()
        await self.cache.stop()
        await self._stop_servers()
        if self._remove_hook is not None:
            self._remove_hook()
        self.state = ManagerState.STOPPED
        self.log.info("manager stopped")

    # -- leadership and controllers -----------------------------------------------------

    async def _lead(self) -> None:
        if self._election is None:
            self._set_leading(True)
            await asyncio.Event().wait()  # lead until cancelled
            return
        self._elector = LeaderElector(
            self.client, self._election, on_change=self._set_leading, logger=self.log
        )
        while True:
            await self._elector.acquire()
            await self._elector.hold()

    def _set_leading(self, leading: bool) -> None:
        """Start every controller on gaining the Lease; cancel them all at once on losing it."""
        if self._election is not None:
            self.metrics.leader.labels(self._election.name).set(1 if leading else 0)
        if leading and self._before_leading:
            self._gate_task = asyncio.create_task(self._pass_gate(), name=f"{self.name}-gate")
        elif leading:
            self._start_leading()
        else:
            if self._gate_task is not None:
                self._gate_task.cancel()
            self._leading.clear()
            for task in self._controller_tasks.values():
                task.cancel()

    async def _pass_gate(self) -> None:
        try:
            for hook in self._before_leading:
                await hook()
        except Exception as err:  # the hook's error ends the process, raised by run()
            self._fatal = err
            self.request_stop()
            return
        self._start_leading()

    def _start_leading(self) -> None:
        self._leading.set()
        for ctrl in self._controllers:
            self._start_controller(ctrl)

    def _start_controller(self, ctrl: Controller) -> None:
        task = self._controller_tasks.get(ctrl.name)
        if task is None or task.done():
            self._controller_tasks[ctrl.name] = asyncio.create_task(
                self._run_controller(ctrl), name=f"controller-{ctrl.name}"
            )

    async def _run_controller(self, ctrl: Controller) -> None:
        try:
            await ctrl.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # run() only ends by cancellation; anything else is a bug
            self.log.exception("controller crashed", controller=ctrl.name)

    async def _stop_controllers(self) -> None:
        tasks = list(self._controller_tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._controller_tasks.clear()
        self._leading.clear()

    # -- probes and metrics -------------------------------------------------------------

    async def _start_server(self) -> None:
        if self._health_bind_address:
            probes = web.Application()
            probes.router.add_get("/healthz", self._serve_healthz)
            probes.router.add_get("/readyz", self._serve_readyz)
            await self._listen("health", probes, self._health_bind_address)
        if self._bind_address is None:
            return
        middlewares = []
        if self._secure is not None:
            self.authorizer = TokenAuthorizer(self.client, ttl=self._secure.ttl, logger=self.log)
            middlewares.append(self.authorizer.middleware(self._secure.protected))
            self.certs = CertReloader(*self._cert_files(self._secure), logger=self.log)
            await self.certs.start()
        app = web.Application(middlewares=middlewares)
        app.router.add_get("/healthz", self._serve_healthz)
        app.router.add_get("/readyz", self._serve_readyz)
        app.router.add_get("/metrics", self._serve_metrics)
        context = self.certs.context if self.certs is not None else None
        await self._listen("diagnostics", app, self._bind_address, context)

    def _cert_files(self, secure: SecureServing) -> tuple[Path, Path]:
        if secure.cert_dir is not None:
            return secure.cert_dir / "tls.crt", secure.cert_dir / "tls.key"
        self._tmp = tempfile.TemporaryDirectory(prefix="machinepool-diagnostics-")
        host = (self._bind_address or "").rpartition(":")[0]
        serving = self_signed(Path(self._tmp.name), (host,) if host else ())
        return serving.cert_file, serving.key_file

    async def _listen(
        self, listener: str, app: web.Application, address: str, context: Any = None
    ) -> None:
        host, _, port = address.rpartition(":")
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        self._runners[listener] = runner
        await web.TCPSite(runner, host or "0.0.0.0", int(port), ssl_context=context).start()

    async def _stop_servers(self) -> None:
        for runner in self._runners.values():
            await runner.cleanup()
        self._runners.clear()
        if self.certs is not None:
            await self.certs.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _check(self, checks: dict[str, HealthCheck]) -> web.Response:
        failed = [name for name, check in checks.items() if not _safe(check)]
        if self.state is not ManagerState.RUNNING:
            failed.insert(0, f"manager {self.state.value}")
        if failed:
            return web.Response(status=500, text="failed: " + ", ".join(failed) + "\n")
        return web.Response(text="ok\n")

    async def _serve_healthz(self, _request: web.Request) -> web.Response:
        return self._check(self._healthz)

    async def _serve_readyz(self, _request: web.Request) -> web.Response:
        return self._check(self._readyz)

    async def _serve_metrics(self, _request: web.Request) -> web.Response:
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _safe(check: HealthCheck) -> bool:
    try:
        return bool(check())
    except Exception:
        return False
