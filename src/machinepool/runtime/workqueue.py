"""The de-duplicating, rate-limited work queue that sits between watches and reconciles.

Informer event handlers ``add`` keys; a ``Controller``'s workers ``get`` them, reconcile, and
call ``done``. The queue reproduces client-go's guarantees, which controllers rely on:

- a key waiting in the queue is held once, however often it is added (a hot object costs one
  reconcile per batch of changes, not one per change);
- a key is never handed to two workers at once; a key added while a worker holds it is queued
  again, once, when that worker calls ``done``;
- ``add_rate_limited`` delays a key by its per-key exponential backoff (5 ms doubling up to
  1000 s); ``forget`` resets that backoff (after a success);
- an *echo* (``add(key, echo=True)``: an event that is exactly a write of the controller
  itself, see ``runtime.ownwrites``) does not cut a failing key's backoff short: it is
  dropped while the key waits for its retry; and ``add_rate_limited(key, fold=True)`` (the
  controller found that everything which arrived during the failed attempt was its own
  writes) makes the retry wait out the backoff instead of running at ``done``. Other adds
  behave as in client-go. Without this, a failing reconcile that writes re-ran at the speed
  of its own writes (a retry storm: every ~70 ms per key while a workload cluster was down);
- ``add_after`` schedules a key for later (a reconcile's ``requeue_after``); of several pending
  delays for one key the earliest wins;
- after ``shutdown`` nothing new is accepted and ``get`` raises ``QueueShutDown`` once empty.

Pure asyncio logic with no Kubernetes in it; its unit tests run in milliseconds.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)


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
    """A de-duplicating FIFO of keys with per-key processing exclusion, delays and backoff.

    Typical worker loop (``Controller`` runs exactly this)::

        key = await queue.get()
        try:
            await reconcile(key)
            queue.forget(key)
        except Exception:
            queue.add_rate_limited(key)
        finally:
            queue.done(key)
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
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()  # waiting in _queue, or to re-queue when processing ends
        self._processing: set[K] = set()
        self._backing_off: set[K] = set()  # failed; a rate-limited retry is scheduled
        self._queued_at: dict[K, float] = {}
        self._delayed: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._wakeup = asyncio.Event()
        self._shutting_down = False

    def __len__(self) -> int:
        """Keys ready to be handed out (the ``workqueue_depth`` metric)."""
        return len(self._queue)

    def is_processing(self, key: K) -> bool:
        return key in self._processing

    def add(self, key: K, *, echo: bool = False) -> None:
        """Queue ``key`` now, unless it is already waiting.

        ``echo``: the add comes from the controller's own write; it never runs a key that is
        backing off before its retry (see the module docstring).
        """
        if self._shutting_down:
            return
        if echo and key in self._backing_off and key not in self._processing:
            return  # its retry is scheduled and will read this version anyway
        if key in self._dirty:
            return
        self._hooks.added()
        self._dirty.add(key)
        self._queued_at.setdefault(key, self._clock())
        if key in self._processing:
            return  # done() queues it again
        self._queue.append(key)
        self._hooks.depth(len(self._queue))
        self._wakeup.set()

    def add_after(self, key: K, delay: float) -> None:
        """Queue ``key`` after ``delay`` seconds; an earlier pending delay for it wins."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        due = self._clock() + delay
        pending = self._delayed.get(key)
        if pending is not None:
            if pending[0] <= due:
                return
            pending[1].cancel()
        handle = asyncio.get_running_loop().call_later(delay, self._fire, key)
        self._delayed[key] = (due, handle)

    def _fire(self, key: K) -> None:
        self._delayed.pop(key, None)
        self._backing_off.discard(key)
        self.add(key)

    def add_rate_limited(self, key: K, *, fold: bool = False) -> None:
        """Queue ``key`` after its backoff delay; each call doubles the next delay.

        ``fold``: for the key a worker holds, whose attempt failed and whose adds during
        the attempt were all echoes of its own writes: they wait for the same delay rather
        than re-queueing the key at ``done``.
        """
        self._hooks.retried()
        if fold and key in self._processing:
            self._dirty.discard(key)
            self._queued_at.pop(key, None)
        self._backing_off.add(key)
        self.add_after(key, self._limiter.when(key))

    def forget(self, key: K) -> None:
        """Reset ``key``'s backoff; call after a successful reconcile."""
        self._limiter.forget(key)
        self._backing_off.discard(key)

    def retries(self, key: K) -> int:
        return self._limiter.retries(key)

    async def get(self) -> K:
        """Wait for the next key and mark it processing; ``done(key)`` must follow."""
        while not self._queue:
            if self._shutting_down:
                raise QueueShutDown
            self._wakeup.clear()
            await self._wakeup.wait()
        key = self._queue.popleft()
        self._hooks.depth(len(self._queue))
        self._processing.add(key)
        self._dirty.discard(key)
        queued = self._queued_at.pop(key, None)
        if queued is not None:
            self._hooks.waited(self._clock() - queued)
        if self._queue:
            self._wakeup.set()  # several workers may be waiting; let the next one in
        return key

    def done(self, key: K) -> None:
        """Finish processing ``key``; queue it again if it was added meanwhile."""
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._hooks.depth(len(self._queue))
            self._wakeup.set()

    def shutdown(self) -> None:
        """Accept nothing more, drop pending delays, and release waiting ``get`` calls."""
        self._shutting_down = True
        for _, handle in self._delayed.values():
            handle.cancel()
        self._delayed.clear()
        self._wakeup.set()
