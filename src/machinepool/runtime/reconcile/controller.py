"""The controller engine: a work queue drained by N workers calling one reconcile function.

Every controller in machinepool (core MachinePool, Machine, kubeadm bootstrap, providers) is a
``Controller`` built by the ``Manager`` (``manager.new_controller(...)``), fed by informer
watches (``controller.watch(informer, mapper)``), and run only while the manager leads.

The reconcile contract, as controller-runtime's:

=========================  ==============================================================
reconcile outcome          what the worker does
=========================  ==============================================================
returns ``Result()``       success: forget the key's backoff; nothing scheduled
or ``None``
returns                    forget the backoff; reconcile again after that many seconds
``Result(requeue_after)``
raises ``TerminalError``   log and count it; forget the backoff; no retry (a later event
                           still triggers a reconcile)
raises anything else       retry with the key's exponential backoff (5 ms doubling to
                           1000 s); any ``Result`` is ignored. Expected failures
                           (``is_expected``: API, network, ``ExpectedError``) are
                           logged in one line with a reason, others with a traceback;
                           a create refused because the namespace is being deleted
                           (``NamespaceTerminating``) at info, like a ``Conflict``
``CancelledError``         the controller is stopping: the key is re-queued, then it
                           propagates
=========================  ==============================================================

A worker never dies: whatever one reconcile does, the worker logs it with the key, counts it
and takes the next key.

Priorities, as controller-runtime's priority queue: a key queued only because its object was
listed (the initial sync when the controller starts, an informer's first list, the replay of
an informer's contents to a new watch) waits at ``LOW_PRIORITY``; a change seen since (a watch
add, update or delete, through any mapper) at ``NORMAL_PRIORITY``, so it is reconciled first.
One difference: a listed object that is being deleted queues at ``NORMAL_PRIORITY`` too. Its
deletion is work a restart interrupted (a drain, a finalizer to release), and behind a
backlog of thousands of settled objects it would wait out every restart of a controller
restarted more often than the backlog takes.
A key keeps the priority it was handed out with for its retry or ``requeue_after``.

Pacing (``watch(..., paced=True)``): a watch whose events arrive faster than a key can be
reconciled, such as each of a 1,000-Machine pool's Machines turning Ready, queues a key whose
last reconcile held the event loop for ``pace_floor`` or more ``PACE_FACTOR`` times the last
such times of all such keys later (at most ``PACE_CAP`` seconds), unless it is queued already.
Held, not taken: a reconcile's own steps, not the round trips it waits on, which leave the loop
to everything else (``_LoopHeld``). Counted in wall time, a pool of 50 Machines on a loaded
host took over 20 ms, almost all of it waiting on its status patch, and each of its Machines
turning Ready then waited four times every such pool's round trips. The sum, not the key's
own duration: ten pools of 1,000 each reconciled every five times its own duration would still
hold the event loop twice over, while against the sum the controller's paced work takes at most
about a fifth of the loop that every other reconcile of the process shares, however many big
keys there are. Keys that reconcile in under ``pace_floor`` are neither delayed nor counted.
The queue's de-duplication does the batching: every event in the pause is read by one
reconcile. A paced watch's ``at_once`` inputs name what is not worth a pause: an update that
changes them (a referenced object turning ready, which happens once per object, not once per
member) is queued at once, since there is nothing to batch it with.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from machinepool.runtime.kube.client import Obj, Resource
from machinepool.runtime.kube.errors import (
    Conflict,
    describe_error,
    error_reason,
    is_expected,
    only_namespace_terminating,
)
from machinepool.runtime.kube.informer import EventHandler, Informer, controller_owner, shuffled
from machinepool.runtime.kube.keys import ObjectKey
from machinepool.runtime.kube.ownwrites import OwnWrites
from machinepool.runtime.reconcile.workqueue import (
    LOW_PRIORITY,
    NORMAL_PRIORITY,
    QueueShutDown,
    RateLimiter,
    WorkQueue,
)
from machinepool.runtime.telemetry.logging import KVLogger, get_logger
from machinepool.runtime.telemetry.metrics import RuntimeMetrics

T = TypeVar("T")

if TYPE_CHECKING:
    from machinepool.runtime.reconcile.sharding import Handover


@dataclass(frozen=True)
class Result:
    """What a successful reconcile asks for next.

    ``requeue_after``: seconds until the key is reconciled again (``None``: only on the next
    event). Use it for polling something that sends no events (a cloud API, a timeout).
    """

    requeue_after: float | None = None


class TerminalError(Exception):
    """A reconcile failure that retrying cannot fix (invalid spec, missing permission).

    The worker logs and counts it and does not retry; a later change to the object will
    trigger a new reconcile. Raise it ``from`` the underlying error.
    """


@runtime_checkable
class Reconciler(Protocol):
    """Anything with an ``async def reconcile(key) -> Result | None``."""

    async def reconcile(self, key: ObjectKey) -> Result | None: ...


ReconcileFunc = Callable[[ObjectKey], Awaitable[Result | None]]
Mapper = Callable[[Obj], Iterable[ObjectKey]]
"""Maps a watched object to the keys to reconcile (none, one or several)."""
Inputs = Callable[[Obj], object]
"""What a reconcile reads from a watched object: an update whose old and new objects give
equal values queues nothing (a heartbeat, a status field nobody downstream counts)."""


def metadata_and_spec(obj: Obj) -> tuple[object, ...]:
    """``Inputs`` for a controller's own kind when it alone writes the status: labels,
    annotations, owners, finalizers, deletion and spec, never the status, so the
    controller's own status writes do not wake it again (each would cost a reconcile that
    finds nothing new: a reconciler reads its own last write through ``OwnReader``)."""
    meta = obj.get("metadata") or {}
    return (
        meta.get("labels"),
        meta.get("annotations"),
        meta.get("ownerReferences"),
        meta.get("finalizers"),
        meta.get("deletionTimestamp"),
        obj.get("spec"),
    )


def object_key(obj: Obj) -> list[ObjectKey]:
    """The default mapper: reconcile the object itself."""
    return [ObjectKey.of(obj)]


def owner_key(kind: str, group: str) -> Mapper:
    """A mapper to the controller owner of ``kind`` in API ``group`` (same namespace).

    >>> ctrl.watch(infra_pools, owner_key("MachinePool", "cluster.x-k8s.io"))
    """

    def mapper(obj: Obj) -> list[ObjectKey]:
        ref = controller_owner(obj)
        if ref is None or ref.get("kind") != kind:
            return []
        if str(ref.get("apiVersion", "")).rpartition("/")[0] != group:
            return []
        return [ObjectKey(ObjectKey.of(obj).namespace, str(ref.get("name", "")))]

    return mapper


PACE_FACTOR = 4.0
"""A paced watch waits this many times the paced keys' last reconciles: their events then cost
the controller at most a fifth of the time."""
PACE_CAP = 10.0
"""Seconds: the longest a paced event waits. At 10 pools of 1,000 (a quarter of a second each)
the sum asks for 10 s; upstream's MachinePool controller looks again every 30 s while replicas
are not ready."""
PACE_FLOOR = 0.02
"""Seconds, a controller's default ``pace_floor``: reconciles that hold the event loop for less
are not remembered (nothing to pace): a pool of a few dozen Machines holds it for less, and its
Node Ready -> Running path stays undelayed."""


class _LoopHeld(Generic[T]):
    """Awaits a coroutine and counts how long its own steps held the event loop.

    Each ``send`` into the coroutine runs it up to its next real wait (a round trip, a lock);
    the time in those calls is the event loop's time spent on it, which pacing bounds. Work the
    coroutine hands to other tasks is theirs, not counted here.
    """

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro = coro
        self.held = 0.0

    def __await__(self) -> Generator[Any, Any, T]:
        value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                step = self._coro.send(value) if error is None else self._coro.throw(error)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            finally:
                self.held += time.perf_counter() - started
            try:
                value, error = (yield step), None
            except GeneratorExit:
                self._coro.close()
                raise
            except BaseException as exc:  # a cancellation: the coroutine decides what it means
                value, error = None, exc


class EnqueueHandler:
    """An ``EventHandler`` that queues the keys ``mapper`` finds; updates map old and new.

    With ``own_writes`` (the controller's), an event whose object is exactly a version the
    controller wrote is queued as an echo, which cannot cut a failing key's backoff short;
    ``arrived`` is told of every object queueing a key that is being reconciled (whether it
    was an echo is decided once the attempt's writes are all recorded).

    With ``inputs``, an update is queued only when ``inputs(old) != inputs(new)``: at scale
    most updates of a watched kind change nothing the reconcile reads (Node heartbeats,
    another controller's status fields), and each would cost a reconcile that finds nothing
    to do. Adds and deletes always pass.

    An initial add (the object was merely listed) queues its keys at ``LOW_PRIORITY``, unless
    the object is being deleted; every other event at ``NORMAL_PRIORITY``.

    With ``delay`` (a paced watch, see the module docstring), a key that is not queued already
    is queued ``delay(key)`` seconds later; echoes of the controller's own writes are not
    delayed, so their backoff rules hold, nor is an update that changes ``at_once``.
    """

    def __init__(
        self,
        queue: WorkQueue[ObjectKey],
        mapper: Mapper = object_key,
        own_writes: OwnWrites | None = None,
        arrived: Callable[[ObjectKey, Obj], None] | None = None,
        inputs: Inputs | None = None,
        delay: Callable[[ObjectKey], float] | None = None,
        at_once: Inputs | None = None,
    ) -> None:
        self._queue = queue
        self._mapper = mapper
        self._own_writes = own_writes
        self._arrived = arrived
        self._inputs = inputs
        self._delay = delay
        self._at_once = at_once

    def watching(self, resource: Resource) -> None:
        """Called by ``Informer.add_handler``: the controller's writes of ``resource``'s kind
        are worth recording, since their echoes and deletes reach this handler."""
        if self._own_writes is not None:
            self._own_writes.watch(resource.group, resource.kind)

    def _enqueue(
        self,
        obj: Obj,
        echo: bool = False,
        change: Obj | None = None,
        priority: int = NORMAL_PRIORITY,
        paced: bool = True,
    ) -> None:
        """Queue ``obj``'s keys; ``change`` is the object version the event carries (for an
        update, the new one, also when the keys come from the old one); ``paced``: false for
        an event that is not delayed whatever the handler's ``delay``."""
        for key in self._mapper(obj):
            if self._arrived is not None and self._queue.is_processing(key):
                self._arrived(key, change if change is not None else obj)
            delay = self._delay(key) if paced and not echo and self._delay is not None else 0.0
            if delay > 0:
                if not self._queue.is_queued(key):
                    self._queue.add_after(key, delay, priority=priority)
                continue
            self._queue.add(key, echo=echo, priority=priority)

    def _echo(self, obj: Obj) -> bool:
        return self._own_writes is not None and self._own_writes.is_own(obj)

    def on_add(self, obj: Obj, initial: bool = False) -> None:
        # A listed object being deleted is work in flight (a drain, a finalizer to release),
        # not a settled object to look over: it goes before the backlog.
        being_deleted = "deletionTimestamp" in (obj.get("metadata") or {})
        priority = LOW_PRIORITY if initial and not being_deleted else NORMAL_PRIORITY
        self._enqueue(obj, self._echo(obj), priority=priority)

    def on_update(self, old: Obj, new: Obj) -> None:
        if self._inputs is not None and self._inputs(old) == self._inputs(new):
            return
        # Both: an owner or label change must reach the old target and the new one.
        echo = self._echo(new)
        paced = self._at_once is None or self._at_once(old) == self._at_once(new)
        self._enqueue(old, echo, new, paced=paced)
        self._enqueue(new, echo, paced=paced)

    def on_delete(self, obj: Obj) -> None:
        if self._own_writes is not None:
            self._own_writes.forget(obj)  # gone: no echo of it will come
        self._enqueue(obj)


class Controller:
    """A named work queue plus ``concurrency`` workers running ``reconcile``.

    ``reconcile`` is an ``async def (key) -> Result | None`` or a ``Reconciler``.
    ``rate_limiter`` defaults to 5 ms-to-1000 s per-key exponential backoff.
    ``metrics`` defaults to a private ``RuntimeMetrics``; the manager passes its own.
    ``handover``: in a sharded manager, asked before each reconcile of the primary kind (the
    first informer watched with the default mapper) whether the key was drained away to
    another shard; if so, it is acknowledged instead of reconciled.

    Controllers are normally made by ``Manager.new_controller`` and started and stopped by the
    manager as it gains and loses leadership. ``run`` can also be awaited directly.
    """

    def __init__(
        self,
        name: str,
        reconcile: ReconcileFunc | Reconciler,
        *,
        concurrency: int = 1,
        rate_limiter: RateLimiter[ObjectKey] | None = None,
        metrics: RuntimeMetrics | None = None,
        handover: Handover | None = None,
        logger: KVLogger | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"controller {name}: concurrency must be >= 1, not {concurrency}")
        self.name = name
        self.concurrency = concurrency
        self._reconcile: ReconcileFunc = (
            reconcile.reconcile if isinstance(reconcile, Reconciler) else reconcile
        )
        self.metrics = metrics or RuntimeMetrics()
        self.metrics.init_controller(name, concurrency)
        self.queue: WorkQueue[ObjectKey] = WorkQueue(
            rate_limiter=rate_limiter, hooks=self.metrics.queue_hooks(name)
        )
        self.log = (logger or get_logger(__name__)).bind(controller=name)
        self.own_writes = OwnWrites()
        """What this controller's reconciles wrote: their echoes do not cut a backoff short."""
        self._arrivals: dict[ObjectKey, list[Obj]] = {}
        """Objects that queued a key while it was being reconciled."""
        self._took: dict[ObjectKey, float] = {}
        """How long each key's last reconcile held the event loop, for keys that held it long
        enough to pace (kept only once a paced handler exists, so other controllers hold no
        entry per key)."""
        self._took_total = 0.0
        """The sum of ``_took``, kept as it changes."""
        self._paced = False
        self.pace_floor = PACE_FLOOR
        """Seconds a reconcile must hold the event loop for its key to be paced (a test lowers
        it to pace a pool of two, which reconciles far faster than a pool worth pacing)."""
        self._watched: list[tuple[Informer, EventHandler]] = []
        self._primary: Informer | None = None
        self._handover = handover
        self._running = asyncio.Event()

    # -- sources ------------------------------------------------------------------------

    def handler(
        self,
        mapper: Mapper = object_key,
        inputs: Inputs | None = None,
        *,
        paced: bool = False,
        at_once: Inputs | None = None,
    ) -> EnqueueHandler:
        """An event handler feeding this controller's queue, for any informer (``inputs``:
        see ``EnqueueHandler``; ``paced`` and ``at_once``: see the module docstring)."""
        delay = self.pace if paced else None
        self._paced = self._paced or paced
        return EnqueueHandler(
            self.queue, mapper, self.own_writes, self._arrival, inputs, delay, at_once
        )

    def pace(self, key: ObjectKey) -> float:
        """Seconds a paced event for ``key`` waits: none for a fast key, else ``PACE_FACTOR``
        times the last reconciles of every key paced, at most ``PACE_CAP``."""
        if key not in self._took:
            return 0.0
        return min(PACE_CAP, PACE_FACTOR * self._took_total)

    def _arrival(self, key: ObjectKey, obj: Obj) -> None:
        self._arrivals.setdefault(key, []).append(obj)

    def _only_echoes_arrived(self, key: ObjectKey) -> bool:
        """Whether everything that queued ``key`` during its attempt was this controller's
        own writes (asked after the attempt, when all its writes are recorded)."""
        arrived = self._arrivals.pop(key, [])
        return bool(arrived) and all(self.own_writes.is_own(obj) for obj in arrived)

    def watch(
        self,
        informer: Informer,
        mapper: Mapper = object_key,
        inputs: Inputs | None = None,
        *,
        paced: bool = False,
        at_once: Inputs | None = None,
        adapter: Callable[[EnqueueHandler], EventHandler] | None = None,
    ) -> EventHandler:
        """Reconcile ``mapper(obj)`` whenever an object of ``informer`` changes (with
        ``inputs``, only when what it returns changed; see ``EnqueueHandler``; ``paced``: not
        sooner than the key's pace allows, unless the update changes ``at_once``; see the
        module docstring). ``adapter`` wraps the handler, for an informer whose objects each
        hold several things reconciled one by one (it passes the handler their events).

        Safe at any time: objects the informer already holds are queued at once.
        Returns the handler, for ``informer.remove_handler``.
        """
        queued = self.handler(mapper, inputs, paced=paced, at_once=at_once)
        handler: EventHandler = queued if adapter is None else adapter(queued)
        informer.add_handler(handler)
        self._watched.append((informer, handler))
        if mapper is object_key and self._primary is None:
            self._primary = informer
            if self._handover is not None:
                self._handover.register(informer.resource)
        return handler

    def enqueue(self, key: ObjectKey) -> None:
        self.queue.add(key)

    @property
    def running(self) -> bool:
        return self._running.is_set()

    # -- running ------------------------------------------------------------------------

    async def run(self) -> None:
        """Run the workers until cancelled.

        On entry every object the watched informers hold is queued (the initial sync, as
        after gaining leadership), so nothing that changed while stopped is missed; at low
        priority, so changes seen from now on go first; in random order, so a controller
        restarted before it gets through them does not serve the same ones first each time.
        """
        listed = [(h, obj) for informer, h in self._watched for obj in informer.list()]
        for handler, obj in shuffled(listed):
            handler.on_add(obj, initial=True)
        self._running.set()
        self.log.info("starting workers", concurrency=self.concurrency)
        try:
            async with asyncio.TaskGroup() as group:
                for i in range(self.concurrency):
                    group.create_task(self._worker(), name=f"{self.name}-worker-{i}")
        finally:
            self._running.clear()
            self.log.info("workers stopped")

    async def _worker(self) -> None:
        while True:
            try:
                key, priority = await self.queue.get_with_priority()
            except QueueShutDown:
                return
            try:
                await self._process(key, priority)
            except asyncio.CancelledError:
                self._arrivals.pop(key, None)
                self.queue.done(key)
                # not finished: whoever runs next reconciles it
                self.queue.add(key, priority=priority)
                raise
            self.queue.done(key)

    async def _process(self, key: ObjectKey, priority: int) -> None:
        log = self.log.bind(key=str(key))
        active = self.metrics.active_workers.labels(self.name)
        active.inc()
        started = time.monotonic()
        reconcile = _LoopHeld(self._reconcile_unless_handed_over(key))
        try:
            with self.own_writes.recording():
                outcome: Result | BaseException | None = await reconcile
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            outcome = exc
        finally:
            active.dec()
            took = time.monotonic() - started
            self._took_total -= self._took.pop(key, 0.0)
            if self._paced and reconcile.held >= self.pace_floor:
                self._took[key] = reconcile.held
                self._took_total += reconcile.held
            if not self._took:
                self._took_total = 0.0  # no float drift left behind
            self.metrics.reconcile_time.labels(self.name).observe(took)
            self.metrics.queue_work.labels(self.name, self.name).observe(took)
        self._settle(key, priority, outcome, log)
        self._arrivals.pop(key, None)

    async def _reconcile_unless_handed_over(self, key: ObjectKey) -> Result | None:
        handover, primary = self._handover, self._primary
        if handover is not None and primary is not None and await handover.release(primary, key):
            return None
        return await self._reconcile(key)

    def _settle(
        self,
        key: ObjectKey,
        priority: int,
        outcome: Result | BaseException | None,
        log: KVLogger,
    ) -> None:
        """Apply the Result/error contract (see the module docstring) to one outcome; a retry
        or requeue keeps the ``priority`` the key was handed out with."""
        match outcome:
            case TerminalError() as exc:
                self.queue.forget(key)
                self._count("error")
                self.metrics.reconcile_errors.labels(self.name).inc()
                self.metrics.terminal_errors.labels(self.name).inc()
                log.error("reconcile failed permanently; not retrying", error=describe_error(exc))
            case Conflict() as exc:
                # An optimistic lock lost to a newer write: routine, and the retry reads the
                # newer copy. Logged quietly, retried with backoff like any error.
                self._retry(key, priority)
                self._count("error")
                self.metrics.reconcile_errors.labels(self.name).inc()
                log.info("object changed since it was read; retrying", error=str(exc))
            case BaseException() as exc if only_namespace_terminating(exc):
                # The namespace is being deleted, and the object with it: what it wanted to
                # create cannot be made, and its own deletion will end the retries. Logged
                # quietly, retried with backoff until the object is gone.
                self._retry(key, priority)
                self._count("error")
                self.metrics.reconcile_errors.labels(self.name).inc()
                log.info("namespace is being deleted; nothing new can be made in it; retrying")
            case BaseException() as exc:
                self._retry(key, priority)
                self._count("error")
                self.metrics.reconcile_errors.labels(self.name).inc()
                # Expected failures (API errors, unreachable clusters, cloud faults) are
                # weather: one line with the reason. Anything else is a bug worth a traceback.
                log.error(
                    "reconcile failed; retrying with backoff",
                    exc_info=None if is_expected(exc) else exc,
                    reason=error_reason(exc),
                    error=describe_error(exc),
                    retries=self.queue.retries(key),
                )
            case Result(requeue_after=float() | int() as after) if after > 0:
                self.queue.forget(key)
                self.queue.add_after(key, float(after), priority=priority)
                self._count("requeue_after")
            case Result() | None:
                self.queue.forget(key)
                self._count("success")
            case other:
                self._retry(key, priority)
                self._count("error")
                log.error("reconcile returned neither Result nor None", returned=repr(other))

    def _retry(self, key: ObjectKey, priority: int) -> None:
        self.queue.add_rate_limited(key, fold=self._only_echoes_arrived(key), priority=priority)

    def _count(self, result: str) -> None:
        self.metrics.reconcile_total.labels(self.name, result).inc()
