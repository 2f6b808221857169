"""Kubernetes Events about the objects controllers reconcile, aggregated so loops do not flood.

Controllers get an ``EventRecorder`` from ``Manager.event_recorder(component)`` and call
``await recorder.event(obj, "Warning", "BootstrapFailed", "...")``. Events are written as
``events.k8s.io/v1`` objects (``regarding``, ``note``, ``series``), which ``kubectl describe``
and ``kubectl events`` show.

Aggregation, like client-go's events library: the first occurrence of (object, type, reason,
action, note) creates an Event; repeats only count locally, and the Event's ``series``
(count, lastObservedTime) is patched at most once per ``series_interval`` (and by
``flush()``). A reconcile failing in a hot loop therefore costs one write per interval, not one
per failure. Like client-go's spam filter, each object has a bucket of ``spam_burst`` Events
that refills one per ``spam_refill`` seconds; beyond it the object's Events are dropped (a pool
of 1,000 Nodes would otherwise write an Event for each nodeRefs change).

Recording never raises and never waits for the API server: like client-go's broadcaster,
``event`` queues the Event (at most ``queue_size``; beyond that it is dropped with a warning)
and one background task writes them in order, so a reconcile's latency does not include its
Events. ``flush()`` waits for the queue and writes pending series counts; ``close()`` (called
by ``Manager.stop``) also ends the writer.

Callers must never pass secret values (tokens, keys, bootstrap data, kubeconfigs) in
``message``: Events are readable by far more users than Secrets are. Name the Secret instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime

from machinepool.runtime.kube.client import EVENTS, Client, Obj
from machinepool.runtime.kube.errors import NamespaceTerminating, NotFound
from machinepool.runtime.kube.ownwrites import stop_recording
from machinepool.runtime.telemetry.logging import KVLogger, get_logger

NOTE_LIMIT = 1024  # the API server rejects longer notes


@dataclass
class _Series:
    name: str
    namespace: str
    count: int
    written_count: int
    written_at: float
    last_observed: str


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _regarding(obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    ref: Obj = {
        "apiVersion": obj.get("apiVersion", ""),
        "kind": obj.get("kind", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return {k: v for k, v in ref.items() if v}


class EventRecorder:
    """Writes aggregated Events for one reporting ``component`` (e.g. ``machinepool-controller``).

    ``series_interval`` [60 s]: the most often one repeating Event is patched.
    ``max_tracked`` [4096]: repeating Events remembered for aggregation (least recent dropped).
    ``queue_size`` [1000, client-go's]: Events waiting to be written before new ones are dropped.
    ``spam_burst`` [25] and ``spam_refill`` [300 s]: client-go's per-object spam filter.
    """

    def __init__(
        self,
        client: Client,
        component: str,
        *,
        instance: str | None = None,
        series_interval: float = 60.0,
        max_tracked: int = 4096,
        queue_size: int = 1000,
        spam_burst: int = 25,
        spam_refill: float = 300.0,
        logger: KVLogger | None = None,
    ) -> None:
        self.client = client
        self.component = component
        self.instance = instance or socket.gethostname()
        self.series_interval = series_interval
        self.max_tracked = max_tracked
        self._series: OrderedDict[tuple[str, ...], _Series] = OrderedDict()
        self._queue: asyncio.Queue[tuple[Obj, str, str, str, str]] = asyncio.Queue(queue_size)
        self._writer: asyncio.Task[None] | None = None
        self.spam_burst = spam_burst
        self.spam_refill = spam_refill
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        """Object -> (tokens, when counted): the spam filter's state, least recent first."""
        self.log = (logger or get_logger(__name__)).bind(recorder=component)

    def _allowed(self, regarding: Obj) -> bool:
        """Take a token from the object's bucket; False when it is empty (drop the Event)."""
        key = str(regarding.get("uid") or f"{regarding.get('namespace')}/{regarding.get('name')}")
        now = time.monotonic()
        tokens, at = self._buckets.pop(key, (float(self.spam_burst), now))
        tokens = min(float(self.spam_burst), tokens + (now - at) / self.spam_refill)
        allowed = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
        while len(self._buckets) > self.max_tracked:
            self._buckets.popitem(last=False)
        return allowed

    async def event(
        self, obj: Obj, type_: str, reason: str, message: str, *, action: str | None = None
    ) -> None:
        """Record that ``reason`` happened to ``obj`` (``type_`` is ``Normal`` or ``Warning``).

        Returns at once; the Event is written in the background (see the module docstring).
        ``message`` must not contain secret values.
        """
        note = message if len(message) <= NOTE_LIMIT else message[: NOTE_LIMIT - 3] + "..."
        regarding = _regarding(obj)
        if not self._allowed(regarding):
            self.log.debug("event dropped by the spam filter", reason=reason)
            return
        try:
            self._queue.put_nowait((regarding, type_, reason, action or reason, note))
        except asyncio.QueueFull:
            self.log.warning("event queue full; dropping event", reason=reason)
            return
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_loop(), name=f"events-{self.component}")

    async def _write_loop(self) -> None:
        stop_recording()  # started by whichever reconcile recorded first; writes for all
        while True:
            item = await self._queue.get()
            try:
                await self._record(*item)
            finally:
                self._queue.task_done()

    async def _record(
        self, regarding: Obj, type_: str, reason: str, action: str, note: str
    ) -> None:
        key = (
            regarding.get("uid") or f"{regarding.get('namespace')}/{regarding.get('name')}",
            type_,
            reason,
            action,
            note,
        )
        try:
            series = self._series.get(key)
            if series is not None:
                try:
                    await self._repeat(key, series)
                    return
                except NotFound:  # the Event expired (TTL): start a new one
                    del self._series[key]
            await self._create(key, regarding, type_, reason, action, note)
        except NamespaceTerminating:  # the object goes with its namespace; so would the Event
            self.log.debug("event dropped: its namespace is being deleted", reason=reason)
        except Exception as exc:  # best effort: an Event must never fail a reconcile
            self.log.warning("could not record event", reason=reason, error=repr(exc))

    async def _create(
        self, key: tuple[str, ...], regarding: Obj, type_: str, reason: str, action: str, note: str
    ) -> None:
        now = _micro_time()
        namespace = regarding.get("namespace") or "default"
        body: Obj = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                "name": f"{regarding.get('name', 'object')}.{time.time_ns():x}",
                "namespace": namespace,
            },
            "eventTime": now,
            "reportingController": self.component,
            "reportingInstance": self.instance,
            "action": action,
            "reason": reason,
            "note": note,
            "type": type_,
            "regarding": regarding,
        }
        created = await self.client.create(EVENTS, body, namespace)
        name = str(created["metadata"]["name"])
        self._series[key] = _Series(name, namespace, 1, 1, time.monotonic(), now)
        while len(self._series) > self.max_tracked:
            self._series.popitem(last=False)

    async def _repeat(self, key: tuple[str, ...], series: _Series) -> None:
        series.count += 1
        series.last_observed = _micro_time()
        self._series.move_to_end(key)
        if time.monotonic() - series.written_at >= self.series_interval:
            await self._write_series(series)

    async def _write_series(self, series: _Series) -> None:
        if series.count == series.written_count:
            return
        patch = {"series": {"count": series.count, "lastObservedTime": series.last_observed}}
        await self.client.patch(EVENTS, series.name, patch, series.namespace)
        series.written_count = series.count
        series.written_at = time.monotonic()

    async def flush(self) -> None:
        """Write every queued Event and pending series count."""
        if self._writer is not None and not self._writer.done():
            await self._queue.join()
        for series in list(self._series.values()):
            try:
                await self._write_series(series)
            except NotFound:  # expired, or gone with its namespace: nothing left to count on
                self.log.debug("event series dropped: its Event is gone", name=series.name)
            except Exception as exc:
                self.log.warning("could not update event series", error=repr(exc))

    async def close(self) -> None:
        """Flush (for at most 5 s) and stop the background writer."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5.0):
                await self.flush()
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
