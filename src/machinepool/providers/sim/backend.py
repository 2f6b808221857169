"""The sim provider's ``Backend``: create, list and delete instances of one SimMachinePool.

Built per reconcile by the sim controller with that pool's settings and the namespace's
current faults; the pool engine calls it. Creation is idempotent: the engine picks the
instance id, the record is created under that name, and a second create of the same id
returns the existing instance (the "creation record" is the instance itself, written in one
atomic request) when it asks for the same pool, zone and template, and fails otherwise. A
zone listed short of capacity in the faults refuses creates with ``CapacityError``. Each new
instance gets a private address free in its namespace and the hostname made from it
(``machinepool.sim.records.allocate_address``), which its Node is named after. "Free" is as the
records informer shows it: two creates in flight at once could both pick one address only if
their instances hash within a few addresses of each other in 16 million; should it happen, the
second instance's kubelet finds its Node name taken and does not join (it says so), and a
health check replaces it, as on a cloud that handed out one address twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Protocol

from machinepool.api.views import SimSettingsView
from machinepool.providers.pool.types import (
    CapacityError,
    CloudError,
    Instance,
    InstanceSpec,
    InstanceState,
)
from machinepool.runtime import SECRETS, AlreadyExists, Client, NotFound, Obj
from machinepool.sim.cloud import Faults, RequestLimits, now_utc
from machinepool.sim.records import (
    STATE_ANNOTATION,
    TERMINATED,
    InstanceRecord,
    allocate_address,
    hostname_of,
    instance_secret,
    provider_id,
)

__all__ = ["SimBackend", "SimPoolSettings"]


DEFAULT_BOOT_DELAY = 20.0
DEFAULT_BOOT_DELAY_SPREAD = 40.0
"""A pool that says nothing of boot times boots as a cloud's instances do, in 20-60 s each:
the embedded default is where most users and tests meet a cloud, and one that boots at once
hides every wait on a booting instance. A test or benchmark that wants speed says so."""


class SimPoolSettings:
    """A SimMachinePool's ``spec.sim`` with defaults applied."""

    def __init__(self, spec: SimSettingsView) -> None:
        delay, spread = spec.boot_delay_seconds, spec.boot_delay_spread_seconds
        unset = delay is None and spread is None
        self.boot_delay = DEFAULT_BOOT_DELAY if unset else float(str(delay or 0))
        self.boot_delay_spread = DEFAULT_BOOT_DELAY_SPREAD if unset else float(str(spread or 0))
        self.boot_failure_rate = float(str(spec.boot_failure_rate or 0))
        self.fail_after_boot_rate = float(str(spec.fail_after_boot_rate or 0))
        self.fail_after_boot_within = float(str(spec.fail_after_boot_within_seconds or 600))
        capacity = int(str(spec.capacity_per_failure_domain or 0))
        self.capacity: int | None = capacity or None

    def fate(self, now: datetime, rng: random.Random) -> tuple[datetime, bool, datetime | None]:
        """An instance created ``now``: when it boots, whether it fails to boot, and when it
        breaks after booting (None: never)."""
        boot_at = now + timedelta(seconds=self.boot_delay + rng.uniform(0, self.boot_delay_spread))
        will_fail = rng.random() < self.boot_failure_rate
        fail_at = None
        if not will_fail and rng.random() < self.fail_after_boot_rate:
            fail_at = boot_at + timedelta(seconds=rng.uniform(0, self.fail_after_boot_within))
        return boot_at, will_fail, fail_at


class Records(Protocol):
    """One pool's instance records, as a ``SimBackend`` reads them (``OnePool``)."""

    def all(self) -> Iterable[InstanceRecord]: ...

    def get(self, instance_id: str) -> InstanceRecord | None:
        """The pool's record of ``instance_id``; ``None`` when it has none."""
        ...

    def top_index(self) -> int:
        """The highest ordinal among the pool's records (0 with none)."""
        ...


class SimBackend:
    """Instances of one pool, stored as Secrets in the pool's namespace.

    ``records`` reads the pool's instance records (``PoolRecords.of``: the informer's view);
    ``owner`` is the ownerReference every record carries (the SimMachinePool), so garbage
    collection removes records a crash left behind.
    ``address_taken`` [the pool's own records] says whether a private address is in use in the
    namespace, whichever pool holds it (``PoolRecords.address_taken``).
    """

    def __init__(
        self,
        client: Client,
        records: Records,
        *,
        namespace: str,
        pool: str,
        cluster: str,
        owner: Obj,
        settings: SimPoolSettings,
        faults: Faults,
        zones: tuple[str, ...],
        limits: RequestLimits | None = None,
        rng: random.Random | None = None,
        address_taken: Callable[[str], bool] | None = None,
    ) -> None:
        self.client = client
        self._records = records
        self.namespace = namespace
        self.pool = pool
        self.cluster = cluster
        self.owner = owner
        self.settings = settings
        self.faults = faults
        self.zones = zones
        self._limits = limits or RequestLimits()
        self._rng = rng or random.Random()
        self._address_taken = address_taken or self._taken_in_pool

    def _taken_in_pool(self, address: str) -> bool:
        return any(r.private_ip == address for r in self._records.all())

    def failure_domains(self) -> Mapping[str, int | None]:
        return {zone: self.settings.capacity for zone in self.zones}

    async def list(self, pool_id: str) -> list[Instance]:
        now = now_utc()
        return sorted(
            (_instance(r, now) for r in self._records.all() if r.pool == pool_id),
            key=lambda i: i.index,
        )

    async def create(self, spec: InstanceSpec) -> Instance:
        await self._weather("create")
        if spec.failure_domain in self.faults.short_zones:
            raise CapacityError(
                spec.failure_domain,
                f"InsufficientInstanceCapacity: the simulated cloud has no capacity in"
                f" {spec.failure_domain} (injected fault)",
            )
        now = now_utc()
        boot_at, will_fail, fail_at = self.settings.fate(now, self._rng)
        address = allocate_address(self.namespace, spec.instance_id, self._address_taken)
        record = InstanceRecord(
            namespace=self.namespace,
            id=spec.instance_id,
            pool=spec.pool_id,
            index=spec.index,
            cluster=self.cluster,
            failure_domain=spec.failure_domain,
            provider_id=provider_id(spec.failure_domain, spec.instance_id),
            template_hash=spec.template_hash,
            version=spec.version,
            created=now,
            boot_at=boot_at,
            will_fail=will_fail,
            bootstrap_version=spec.bootstrap_version,
            forced_state="",
            attributes=dict(spec.attributes),
            fail_at=fail_at,
            private_ip=address,
            hostname=hostname_of(address),
        )
        try:
            secret = instance_secret(
                record, userdata=spec.bootstrap_data, labels=spec.labels, owner=self.owner
            )
            created = await self.client.create(SECRETS, secret, self.namespace)
        except AlreadyExists:
            created = await self.client.get(SECRETS, spec.instance_id, self.namespace)
            _same_request(InstanceRecord.from_secret(created), spec)
        self._after("create")
        return _instance(InstanceRecord.from_secret(created), now_utc())

    async def delete(self, instance_id: str) -> None:
        """Terminate. The pool's highest ordinal stays as a tombstone, so no id is ever
        reused; any other record goes at once, one request instead of a tombstone now and a
        purge later (the node simulator deletes the Node of a deleted record too)."""
        await self._weather("delete")
        doomed = self._records.get(instance_id)
        with contextlib.suppress(NotFound):
            if doomed is not None and doomed.index < self._records.top_index():
                await self.client.delete(SECRETS, instance_id, self.namespace)
            else:
                patch = {"metadata": {"annotations": {STATE_ANNOTATION: TERMINATED}}}
                await self.client.patch(SECRETS, instance_id, patch, self.namespace)
        self._after("delete")

    async def purge(self, instance_id: str) -> None:
        """Remove a terminated instance's record for good."""
        await self.client.delete(SECRETS, instance_id, self.namespace)

    async def _weather(self, call: str) -> None:
        """Injected faults that strike before the call acts: throttling first, as a cloud
        refuses a call over its account's rate before looking at it."""
        if not self._limits.admit(self.namespace, self.faults):
            raise CloudError(
                f"RequestLimitExceeded: the simulated cloud throttled {call} (more than"
                f" {self.faults.request_rate:g} calls per second in {self.namespace})"
            )
        if self.faults.stall_rate and self._rng.random() < self.faults.stall_rate:
            await asyncio.sleep(self.faults.stall_seconds)
        if self.faults.error_rate and self._rng.random() < self.faults.error_rate:
            raise CloudError(f"simulated cloud error on {call} (injected fault)")

    def _after(self, call: str) -> None:
        """Injected faults that strike after the call took effect (a lost response)."""
        if self.faults.error_after_rate and self._rng.random() < self.faults.error_after_rate:
            raise CloudError(f"simulated cloud timeout after {call} (injected fault)")


def _same_request(existing: InstanceRecord, spec: InstanceSpec) -> None:
    """A create of an existing id is a retry only if it asks for the same instance; anything
    else is refused, as a cloud refuses a reused client token with other parameters (EC2's
    IdempotentParameterMismatch), instead of handing back an instance that is not the one
    asked for."""
    asked = (spec.pool_id, spec.failure_domain, spec.template_hash)
    have = (existing.pool, existing.failure_domain, existing.template_hash)
    if asked != have:
        raise CloudError(
            f"IdempotentParameterMismatch: instance {spec.instance_id} exists as pool"
            f" {have[0]}, {have[1]}, template {have[2]}; this create asked for pool {asked[0]},"
            f" {asked[1]}, template {asked[2]}"
        )


def _instance(record: InstanceRecord, now: datetime) -> Instance:
    return Instance(
        id=record.id,
        provider_id=record.provider_id,
        failure_domain=record.failure_domain,
        state=InstanceState(record.state_at(now)),
        template_hash=record.template_hash,
        created=record.created,
        bootstrap_version=record.bootstrap_version,
        index=record.index,
    )
