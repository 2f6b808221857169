"""The de-duplicating, rate-limited priority work queue that sits between watches and reconciles.

Informer event handlers ``add`` keys; a ``Controller``'s workers ``get`` them, reconcile, and
call ``done``. The queue reproduces client-go's guarantees, which controllers rely on:

- a key waiting in the queue is held once, however often it is added (a hot object costs one
  reconcile per batch of changes, not one per change);
- a key is never handed to two workers at once; a key added while a worker holds it is queued
  again, once, when that worker calls ``done``;
- ``add_rate_limited`` delays a key by its per-key exponential backoff (5 ms doubling up to
  1000 s); ``forget`` resets that backoff (after a success);
- an *echo* (``add(key, echo=True)``: an event that is exactly a write of the controller
  itself, see ``runtime.kube.ownwrites``) does not cut a failing key's backoff short: it is
  dropped while the key waits for its retry; and ``add_rate_limited(key, fold=True)`` (the
  controller found that everything which arrived during the failed attempt was its own
  writes) makes the retry wait out the backoff instead of running at ``done``. Other adds
  behave as in client-go. Without this, a failing reconcile that writes re-ran at the speed
  of its own writes (a retry storm: every ~70 ms per key while a workload cluster was down);
- ``add_after`` schedules a key for later (a reconcile's ``requeue_after``); of several pending
  delays for one key the earliest wins (at the highest priority any of them asked for);
- after ``shutdown`` nothing new is accepted and ``get`` raises ``QueueShutDown`` once empty.

and, as controller-runtime's priority queue, priorities: a key is added with a ``priority``
(``NORMAL_PRIORITY``, 0, unless said otherwise) and a worker always gets a key of the highest
priority waiting, first come first served within one priority. A key added again while it
waits keeps the higher of its priorities (raised, never lowered; a raised key goes to the
back of its new priority). The controller queues what its informers hold when it starts at
``LOW_PRIORITY``, so after a restart a change seen since is reconciled before the backlog of
everything that was merely listed: at 1,000 Nodes that backlog outlived a controller killed
every few seconds, and the pools still rolling waited behind it.

Pure asyncio logic with no Kubernetes in it; its unit tests run in milliseconds.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable, Hashable
from typing import Final, Generic, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)

NORMAL_PRIORITY: Final = 0
"""The priority of an add that says none: an event seen while the controller runs."""
LOW_PRIORITY: Final = -100
"""The priority of a key queued only because it was listed (the initial sync on start, an
informer's first list, a handler's replay of what an informer holds); controller-runtime's
``handler.LowPriority`` has the same value."""


class QueueShutDown(Exception):
    """``get`` on a queue that was shut down and has nothing left."""


class RateLimiter(Protocol[K]):  # type: ignore[misc]
    """Decides how long a failing key waits before its next attempt."""

    def when(self, key: K) -> float:
        """Seconds to wait before the next retry of ``key``; counts the retry."""

    def forget(self, key: K) -> None:
        """Reset ``key``'s history (it succeeded or no longer matters)."""

    def retries(self, key: K) -> int:
        """How many times ``key`` failed since it was last forgotten."""


class ExponentialBackoff(Generic[K]):
    """Per-key exponential backoff: ``base * 2**failures``, capped at ``cap`` seconds.

    Defaults are client-go's controller defaults: 5 ms doubling up to 1000 s.

    >>> rl = ExponentialBackoff[str]()
    >>> [rl.when("a") for _ in range(3)]
    [0.005, 0.01, 0.02]
    """

    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        self.base = base
        self.cap = cap
        self._failures: dict[K, int] = {}

    def when(self, key: K) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        # Beyond 2**64 the float overflows long after the cap was reached; stop growing.
        return min(self.base * 2.0 ** min(failures, 64), self.cap)

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def retries(self, key: K) -> int:
        return self._failures.get(key, 0)


class QueueHooks(Protocol):
    """Where a queue reports what metrics need; ``Controller`` wires Prometheus here."""

    def added(self) -> None: ...
    def retried(self) -> None: ...
    def depth(self, depth: int) -> None: ...
    def waited(self, seconds: float) -> None: ...


class _NoHooks:
    def added(self) -> None:
        pass

    def retried(self) -> None:
        pass

    def depth(self, depth: int) -> None:
        pass

    def waited(self, seconds: float) -> None:
        pass


class WorkQueue(Generic[K]):
    """A de-duplicating priority queue of keys (FIFO within a priority) with per-key
    processing exclusion, delays and backoff.

    Typical worker loop (``Controller`` runs this, passing the priority on as below)::

        key, priority = await queue.get_with_priority()
        try:
            await reconcile(key)
            queue.forget(key)
        except Exception:
            queue.add_rate_limited(key, priority=priority)
        finally:
            queue.done(key)

    A retry (``add_rate_limited``) and a requeue (``add_after``) keep the priority the key was
    handed out with, as controller-runtime's controller does: a listed key that fails stays
    behind real changes after its backoff, and a changed key that fails is not pushed behind
    a backlog of listed ones. Priorities of one key merge only while it waits to be handed
    out (the higher one wins); a pending delay keeps its own priority until it fires.

    For example, a key listed first and a key changed later::

        queue.add(listed, priority=LOW_PRIORITY)
        queue.add(changed)
        assert await queue.get() == changed
    """

    def __init__(
        self,
        *,
        rate_limiter: RateLimiter[K] | None = None,
        hooks: QueueHooks | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limiter: RateLimiter[K] = rate_limiter or ExponentialBackoff[K]()
        self._hooks: QueueHooks = hooks or _NoHooks()
        self._clock = clock
        # Ready keys: a heap of (-priority, order, key); an entry whose order is no longer
        # the key's in _ready_order was superseded (raised, or handed out) and is skipped.
        self._heap: list[tuple[int, int, K]] = []
        self._ready_order: dict[K, int] = {}
        self._order = itertools.count()
        self._dirty: dict[K, int] = {}  # waiting, or to re-queue at done: -> its priority
        self._processing: set[K] = set()
        self._backing_off: set[K] = set()  # failed; a rate-limited retry is scheduled
        self._queued_at: dict[K, float] = {}
        self._delayed: dict[K, tuple[float, int, asyncio.TimerHandle]] = {}
        self._wakeup = asyncio.Event()
        self._shutting_down = False

    def __len__(self) -> int:
        """Keys ready to be handed out, of every priority (the ``workqueue_depth`` metric)."""
        return len(self._ready_order)

    def is_processing(self, key: K) -> bool:
        return key in self._processing

    def is_queued(self, key: K) -> bool:
        """Whether ``key`` will be handed out again without another add (waiting, or added
        while a worker holds it)."""
        return key in self._dirty

    def add(self, key: K, *, echo: bool = False, priority: int = NORMAL_PRIORITY) -> None:
        """Queue ``key`` now at ``priority``, unless it is already waiting; a key waiting at a
        lower priority is raised to this one.

        ``echo``: the add comes from the controller's own write; it never runs a key that is
        backing off before its retry (see the module docstring).
        """
        if self._shutting_down:
            return
        if echo and key in self._backing_off and key not in self._processing:
            return  # its retry is scheduled and will read this version anyway
        queued = self._dirty.get(key)
        if queued is not None:
            if priority > queued:
                self._dirty[key] = priority
                if key in self._ready_order:
                    self._push(key, priority)  # supersedes its lower entry
            return
        self._hooks.added()
        self._dirty[key] = priority
        self._queued_at.setdefault(key, self._clock())
        if key in self._processing:
            return  # done() queues it again
        self._push(key, priority)

    def _push(self, key: K, priority: int) -> None:
        order = next(self._order)
        self._ready_order[key] = order
        heapq.heappush(self._heap, (-priority, order, key))
        self._hooks.depth(len(self._ready_order))
        self._wakeup.set()

    def add_after(self, key: K, delay: float, *, priority: int = NORMAL_PRIORITY) -> None:
        """Queue ``key`` at ``priority`` after ``delay`` seconds; of several pending delays for
        it the earliest wins, at the highest priority any of them asked for."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key, priority=priority)
            return
        due = self._clock() + delay
        pending = self._delayed.get(key)
        if pending is not None:
            priority = max(priority, pending[1])
            if pending[0] <= due:
                self._delayed[key] = (pending[0], priority, pending[2])
                return
            pending[2].cancel()
        handle = asyncio.get_running_loop().call_later(delay, self._fire, key)
        self._delayed[key] = (due, priority, handle)

    def _fire(self, key: K) -> None:
        pending = self._delayed.pop(key, None)
        self._backing_off.discard(key)
        self.add(key, priority=NORMAL_PRIORITY if pending is None else pending[1])

    def add_rate_limited(
        self, key: K, *, fold: bool = False, priority: int = NORMAL_PRIORITY
    ) -> None:
        """Queue ``key`` at ``priority`` after its backoff delay; each call doubles the next
        delay. Pass the priority the key was handed out with (``get_with_priority``).

        ``fold``: for the key a worker holds, whose attempt failed and whose adds during
        the attempt were all echoes of its own writes: they wait for the same delay rather
        than re-queueing the key at ``done``.
        """
        self._hooks.retried()
        if fold and key in self._processing:
            self._dirty.pop(key, None)
            self._queued_at.pop(key, None)
        self._backing_off.add(key)
        self.add_after(key, self._limiter.when(key), priority=priority)

    def forget(self, key: K) -> None:
        """Reset ``key``'s backoff; call after a successful reconcile."""
        self._limiter.forget(key)
        self._backing_off.discard(key)

    def retries(self, key: K) -> int:
        return self._limiter.retries(key)

    async def get(self) -> K:
        """Wait for the next key (the oldest of the highest priority) and mark it
        processing; ``done(key)`` must follow."""
        key, _ = await self.get_with_priority()
        return key

    async def get_with_priority(self) -> tuple[K, int]:
        """``get``, also saying the priority the key waited at: retries and requeues of it
        pass that on."""
        while not self._ready_order:
            if self._shutting_down:
                raise QueueShutDown
            self._wakeup.clear()
            await self._wakeup.wait()
        while True:
            negative, order, key = heapq.heappop(self._heap)
            if self._ready_order.get(key) == order:
                break
        del self._ready_order[key]
        if not self._ready_order:
            self._heap.clear()  # only superseded entries are left
        self._hooks.depth(len(self._ready_order))
        self._processing.add(key)
        self._dirty.pop(key, None)
        queued = self._queued_at.pop(key, None)
        if queued is not None:
            self._hooks.waited(self._clock() - queued)
        if self._ready_order:
            self._wakeup.set()  # several workers may be waiting; let the next one in
        return key, -negative

    def done(self, key: K) -> None:
        """Finish processing ``key``; queue it again (at the highest priority it was added
        with meanwhile) if it was added meanwhile."""
        self._processing.discard(key)
        priority = self._dirty.get(key)
        if priority is not None:
            self._push(key, priority)

    def shutdown(self) -> None:
        """Accept nothing more, drop pending delays, and release waiting ``get`` calls."""
        self._shutting_down = True
        for _, _, handle in self._delayed.values():
            handle.cancel()
        self._delayed.clear()
        self._wakeup.set()
