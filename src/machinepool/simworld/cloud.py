"""The simulated cloud: instances stored in Secrets in the management cluster.

Each launch of a pool's instances is one Secret in its pool's namespace (the format:
``records.py``). Keeping the
cloud in the API server rather than in controller memory means it survives controller restarts
(even ``kill -9``), is shared with the node simulator (``machinepool.simworld.kubelet``) and is
visible to tests. A Secret, not a ConfigMap, because an instance keeps the bootstrap data it
booted with, and that holds a join token.

Faults are injected through a ConfigMap ``machinepool-sim-faults`` in the pool's namespace
(``errorRate``, ``errorAfterRate``, ``stallRate``, ``stallSeconds``,
``insufficientCapacityZones``, ``requestsPerSecond`` and ``requestBurst``; the provider
watches it, ``faults.py``) or per instance with ``fail_instance``. The sim provider's backend
(``machinepool.providers.sim``) and the node simulator read the records; tests use
``SimCloud`` to inject faults.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from machinepool.runtime import CONFIGMAPS, SECRETS, Client, NotFound
from machinepool.simworld.records import (
    FAILED,
    INSTANCE_LABEL,
    TERMINATED,
    InstanceRecord,
    kubelet_patch,
    records_in,
    state_patch,
)

__all__ = ["DEFAULT_ZONES", "FAULTS_CONFIGMAP", "Faults", "RequestLimits", "SimCloud", "now_utc"]

DEFAULT_ZONES = ("zone-a", "zone-b", "zone-c")
FAULTS_CONFIGMAP = "machinepool-sim-faults"


@dataclass(frozen=True)
class Faults:
    """Fractions (0-1) of cloud calls that fail before acting (``error_rate``), fail after
    acting (``error_after_rate``: the call took effect but reports an error, as a timeout
    does), or stall ``stall_seconds`` first (``stall_rate``); and the zones that have run out
    of capacity (``short_zones``: every create there fails with an insufficient-capacity
    error until the zone is taken off the list)."""

    error_rate: float = 0.0
    error_after_rate: float = 0.0
    stall_rate: float = 0.0
    stall_seconds: float = 0.0
    short_zones: frozenset[str] = frozenset()
    request_rate: float = 0.0
    """Cloud calls per second the namespace's account may make (0: unlimited); calls beyond
    it, after a burst of ``request_burst``, are throttled (``RequestLimits``)."""
    request_burst: float = 0.0
    """Calls allowed at once after a quiet spell; at least 1, ``request_rate`` when unset."""

    @classmethod
    def from_configmap(cls, data: Mapping[str, str]) -> Faults:
        def number(key: str) -> float:
            try:
                return float(data.get(key, "0") or 0)
            except ValueError:
                return 0.0

        zones = data.get("insufficientCapacityZones") or ""
        return cls(
            number("errorRate"),
            number("errorAfterRate"),
            number("stallRate"),
            number("stallSeconds"),
            frozenset(z.strip() for z in zones.split(",") if z.strip()),
            number("requestsPerSecond"),
            number("requestBurst"),
        )

    def to_configmap(self) -> dict[str, str]:
        return {
            "errorRate": str(self.error_rate),
            "errorAfterRate": str(self.error_after_rate),
            "stallRate": str(self.stall_rate),
            "stallSeconds": str(self.stall_seconds),
            "insufficientCapacityZones": ",".join(sorted(self.short_zones)),
            "requestsPerSecond": str(self.request_rate),
            "requestBurst": str(self.request_burst),
        }


class RequestLimits:
    """The cloud's API rate limit, one token bucket per account (namespace), as EC2 throttles
    an account's calls: ``admit`` says whether a call goes through now.

    Buckets live in the provider process. A bucket that has filled up again is the same as
    none, so it is dropped: the map holds only namespaces throttled lately.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def __len__(self) -> int:
        return len(self._buckets)

    def admit(self, namespace: str, faults: Faults) -> bool:
        """Take one call's token from ``namespace``'s bucket; False when it is empty."""
        now = self._clock()
        for ns in [ns for ns, b in self._buckets.items() if b.tokens_at(now) >= b.burst]:
            del self._buckets[ns]
        if faults.request_rate <= 0:
            return True
        burst = max(1.0, faults.request_burst or faults.request_rate)
        bucket = self._buckets.get(namespace) or _Bucket(faults.request_rate, burst, burst, now)
        tokens = min(burst, bucket.tokens_at(now))
        admitted = tokens >= 1
        left = tokens - 1 if admitted else tokens
        self._buckets[namespace] = _Bucket(faults.request_rate, burst, left, now)
        return admitted


@dataclass(frozen=True)
class _Bucket:
    rate: float
    burst: float
    tokens: float
    counted: float

    def tokens_at(self, now: float) -> float:
        return self.tokens + (now - self.counted) * self.rate


def now_utc() -> datetime:
    return datetime.now(UTC)


class SimCloud:
    """Operator and test access to the simulated cloud: inspect instances, inject faults.

    >>> cloud = SimCloud(client)
    >>> await cloud.fail_instance("ns", "pool-ab12c-3")
    >>> await cloud.set_faults("ns", Faults(error_rate=0.5))
    """

    def __init__(self, client: Client) -> None:
        self.client = client

    async def instances(self, namespace: str, pool: str | None = None) -> list[InstanceRecord]:
        """Every instance record in ``namespace`` (of ``pool`` when given), by index."""
        listed = await self.client.list(SECRETS, namespace, label_selector=INSTANCE_LABEL)
        records = [r for s in listed.items for r in records_in(s)]
        return sorted((r for r in records if pool is None or r.pool == pool), key=lambda r: r.index)

    async def instance(self, namespace: str, instance_id: str) -> InstanceRecord:
        """One instance's record, read from the API server; ``NotFound`` when there is none."""
        for record in await self.instances(namespace):
            if record.id == instance_id:
                return record
        raise NotFound(404, "NotFound", f"no instance {instance_id} in {namespace}")

    async def fail_instance(self, namespace: str, instance_id: str, reason: str = "") -> None:
        """Break an instance for good (its Node turns NotReady; the pool replaces it)."""
        await self._force(namespace, instance_id, FAILED, reason or "Injected")

    async def stop_kubelet(self, namespace: str, instance_id: str, stopped: bool = True) -> None:
        """Kill an instance's kubelet: no join if it has not joined, no heartbeats if it has
        (its Node turns Ready=Unknown after the node monitor grace period). The instance keeps
        running as far as the cloud and the pool can tell: only a health check notices.
        ``stopped`` False starts it again."""
        record = await self.instance(namespace, instance_id)
        await self.client.patch(SECRETS, record.launch, kubelet_patch(record, stopped), namespace)

    async def terminate_instance(self, namespace: str, instance_id: str, reason: str = "") -> None:
        """Terminate an instance out of band, as a cloud console would."""
        await self._force(namespace, instance_id, TERMINATED, reason or "OutOfBand")

    async def _force(self, namespace: str, instance_id: str, state: str, reason: str) -> None:
        record = await self.instance(namespace, instance_id)
        patch = state_patch(record, state, reason)
        await self.client.patch(SECRETS, record.launch, patch, namespace)

    async def faults(self, namespace: str) -> Faults:
        """The faults in force in ``namespace``, read from the API server."""
        try:
            cm = await self.client.get(CONFIGMAPS, FAULTS_CONFIGMAP, namespace)
        except NotFound:
            return Faults()
        return Faults.from_configmap(cm.get("data") or {})

    async def set_faults(self, namespace: str, faults: Faults) -> None:
        """Make cloud calls for pools in ``namespace`` fail or stall from now on (from the
        provider's next reconcile once its watch has the change: milliseconds)."""
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": FAULTS_CONFIGMAP, "namespace": namespace},
            "data": faults.to_configmap(),
        }
        await self.client.apply(CONFIGMAPS, body, field_manager="machinepool-sim")
