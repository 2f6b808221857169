"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does.

The ``Manager`` runs one ``LeaderElector`` so that of several replicas exactly one runs the
controllers. The algorithm, and its timing defaults, are client-go's:

- a candidate reads the Lease every ``retry_period``; it takes the Lease when nobody holds it,
  when the holder released it (empty ``holderIdentity``), or when the record has not changed
  for ``leaseDurationSeconds`` *as observed on this candidate's own clock* (so clock skew
  between machines does not matter);
- the leader renews every ``retry_period``; if it cannot renew for ``renew_deadline`` it
  considers the Lease lost (and the manager stops its controllers at once);
- writes use the Lease's resourceVersion, so of two racing candidates one gets a Conflict;
- on graceful shutdown the leader releases the Lease (clears ``holderIdentity``) so a
  successor takes over immediately instead of after ``lease_duration``.

``renew_deadline`` must be shorter than ``lease_duration``: a leader gives up before anyone
else may take over.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from machinepool.runtime.kube.client import LEASES, Client, Obj
from machinepool.runtime.kube.errors import AlreadyExists, Conflict, NotFound
from machinepool.runtime.telemetry.logging import KVLogger, get_logger


def default_identity() -> str:
    """``<hostname>_<uuid>``: unique per process, readable in ``kubectl get lease``."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True)
class LeaderElectionConfig:
    """Where the Lease lives and how it is timed (seconds).

    ``name``/``namespace``: the Lease object. ``identity``: this candidate [hostname_uuid].
    ``lease_duration`` [15]: how long a silent leader's Lease stays valid.
    ``renew_deadline`` [10]: how long a leader keeps failing renewals before giving up.
    ``retry_period`` [2]: interval between acquire and renew attempts.
    ``release_on_cancel`` [True]: clear the Lease on graceful shutdown.
    ``labels`` [none]: labels of a Lease this candidate creates (a sharded manager's shard
    Leases carry their ring's name, so the assigner can list them).
    """

    name: str
    namespace: str
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_cancel: bool = True
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election needs 0 < retry_period < renew_deadline < lease_duration, got "
                f"{self.retry_period}, {self.renew_deadline}, {self.lease_duration}"
            )


def _micro_time(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquires, renews and releases one Lease for one identity.

    ``on_change(leading)`` is called whenever leadership is gained or lost.
    """

    def __init__(
        self,
        client: Client,
        config: LeaderElectionConfig,
        *,
        on_change: Callable[[bool], None] | None = None,
        logger: KVLogger | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self._on_change = on_change
        self._leading = False
        self._observed_record: tuple[str, str, str] | None = None
        self._observed_at = 0.0
        self.log = (logger or get_logger(__name__)).bind(
            lease=f"{config.namespace}/{config.name}", identity=config.identity
        )

    @property
    def is_leader(self) -> bool:
        return self._leading

    async def acquire(self) -> None:
        """Return once this candidate holds the Lease (retrying every ``retry_period``)."""
        while not await self._try_acquire_or_renew():  # noqa: ASYNC110 - polling is the protocol
            await asyncio.sleep(self.config.retry_period * random.uniform(1.0, 1.2))
        self._set_leading(True)

    async def hold(self) -> None:
        """Renew the Lease until it is lost; return when it is (leadership is then off)."""
        cfg = self.config
        last_renew = time.monotonic()
        while True:
            await asyncio.sleep(cfg.retry_period)
            remaining = cfg.renew_deadline - (time.monotonic() - last_renew)
            renewed = False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(remaining, 0.05)):
                    renewed = await self._try_acquire_or_renew()
            if renewed:
                last_renew = time.monotonic()
            elif not self._leading or time.monotonic() - last_renew >= cfg.renew_deadline:
                self.log.warning("leader lease lost")
                self._set_leading(False)
                return

    async def release(self) -> None:
        """Give the Lease up if held, so a successor need not wait ``lease_duration``."""
        if not self._leading:
            return
        self._set_leading(False)
        try:
            lease = await self.client.get(LEASES, self.config.name, self.config.namespace)
            spec = lease.setdefault("spec", {})
            if spec.get("holderIdentity") != self.config.identity:
                return
            spec.update(holderIdentity=None, leaseDurationSeconds=1, renewTime=_micro_time())
            await self.client.replace(LEASES, lease)
            self.log.info("leader lease released")
        except Exception as exc:  # best effort: the lease expires on its own
            self.log.warning("could not release leader lease", error=str(exc))

    def _set_leading(self, leading: bool) -> None:
        if leading != self._leading:
            self._leading = leading
            if leading:
                self.log.info("became leader")
            if self._on_change is not None:
                self._on_change(leading)

    async def _try_acquire_or_renew(self) -> bool:
        cfg = self.config
        try:
            lease = await self.client.get(LEASES, cfg.name, cfg.namespace)
        except NotFound:
            return await self._create()
        except Exception as exc:  # any failure is just "not this time"
            self.log.debug("reading leader lease failed", error=repr(exc))
            return False
        spec: Obj = lease.setdefault("spec", {})
        holder = str(spec.get("holderIdentity") or "")
        self._observe(spec)
        if holder and holder != cfg.identity:
            if self._leading:
                self._set_leading(False)  # someone took it over: stop at once
                return False
            duration = float(spec.get("leaseDurationSeconds") or cfg.lease_duration)
            if time.monotonic() < self._observed_at + duration:
                return False
        now = _micro_time()
        if holder != cfg.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update(
            holderIdentity=cfg.identity,
            leaseDurationSeconds=math.ceil(cfg.lease_duration),
            renewTime=now,
        )
        try:
            updated = await self.client.replace(LEASES, lease)
        except Exception as exc:  # any failure is just "not this time"
            if not isinstance(exc, Conflict):
                self.log.debug("writing leader lease failed", error=repr(exc))
            return False
        self._observe(updated.get("spec") or {})
        return True

    async def _create(self) -> bool:
        cfg = self.config
        now = _micro_time()
        body: Obj = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": cfg.name, "namespace": cfg.namespace, "labels": dict(cfg.labels)},
            "spec": {
                "holderIdentity": cfg.identity,
                "leaseDurationSeconds": math.ceil(cfg.lease_duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        try:
            created = await self.client.create(LEASES, body, cfg.namespace)
        except AlreadyExists:
            return False
        except Exception as exc:  # any failure is just "not this time"
            self.log.debug("creating leader lease failed", error=repr(exc))
            return False
        self._observe(created.get("spec") or {})
        return True

    def _observe(self, spec: Obj) -> None:
        """Remember when the record last changed, on our own monotonic clock."""
        record = (
            str(spec.get("holderIdentity") or ""),
            str(spec.get("renewTime") or ""),
            str(spec.get("leaseDurationSeconds") or ""),
        )
        if record != self._observed_record:
            self._observed_record = record
            self._observed_at = time.monotonic()
