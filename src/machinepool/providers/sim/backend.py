"""The sim provider's ``Backend``: create, list and delete instances of one SimMachinePool.

Built per reconcile by the sim controller with that pool's settings and the namespace's
current faults; the pool engine calls it. The engine creates single instances; the creates of
one step, sent together, are written together, one request per launch block
(``machinepool.simworld.records.launch_name``, ``_Launches``). Each cloud call still meets the
injected faults on its own, as calls of one instance each. Creation is idempotent: the engine
picks the instance id, its block is fixed by its ordinal, and a second create of the same id
returns the existing instance (the "creation record" is the instance itself, written in one
atomic request) when it asks for the same pool, zone and template, and fails otherwise. A
zone listed short of capacity in the faults refuses creates with ``CapacityError``. Each new
instance gets a private address free in its namespace and the hostname made from it
(``machinepool.simworld.records.allocate_address``), which its Node is named after. "Free" is as the
records informer shows it: two creates in flight at once could both pick one address only if
their instances hash within a few addresses of each other in 16 million; should it happen, the
second instance's kubelet finds its Node name taken and does not join (it says so), and a
health check replaces it, as on a cloud that handed out one address twice. Warm-pool
instances (``InstanceSpec.warm``) boot as any other and then stop; ``start`` runs one.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
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
from machinepool.runtime import SECRETS, Client, Conflict, NotFound, Obj, gather_bounded
from machinepool.simworld.cloud import Faults, RequestLimits, now_utc
from machinepool.simworld.records import (
    STOPPED,
    TERMINATED,
    InstanceRecord,
    allocate_address,
    hostname_of,
    instance_ids,
    launch_entries,
    launch_name,
    launch_names,
    launch_secret,
    provider_id,
    record_in,
    records_in,
    removal_patch,
    start_patch,
    state_patch,
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
        self.start_delay = float(str(spec.start_delay_seconds or 0))

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

    def launch(self, name: str) -> Obj | None:
        """The pool's launch Secret ``name``; ``None`` when there is none."""
        ...

    def empty_launches(self) -> list[Obj]:
        """The pool's launch Secrets that hold no instance."""
        ...


class SimBackend:
    """Instances of one pool, stored in launch Secrets in the pool's namespace.

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
        self._claimed: set[str] = set()
        """Addresses given to instances of this backend's launches not yet in the informer."""
        self._launches = _Launches(self)

    def _taken_in_pool(self, address: str) -> bool:
        return any(r.private_ip == address for r in self._records.all())

    def failure_domains(self) -> Mapping[str, int | None]:
        return {zone: self.settings.capacity for zone in self.zones}

    async def list(self, pool_id: str) -> list[Instance]:
        """The pool's instances; deletes a launch every instance has left (see ``_remove``)."""
        now = now_utc()
        for launch in self._records.empty_launches():
            meta = launch["metadata"]
            with contextlib.suppress(Conflict):  # launched into since: it stays
                await self.client.delete(
                    SECRETS,
                    meta["name"],
                    self.namespace,
                    uid=meta.get("uid"),
                    resource_version=launch_version(launch),
                )
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
        address = allocate_address(
            self.namespace,
            spec.instance_id,
            lambda a: a in self._claimed or self._address_taken(a),
        )
        self._claimed.add(address)
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
            warm=spec.warm,
        )
        stored = await self._launches.add(record, spec)
        self._after("create")
        return _instance(stored, now_utc())

    async def start(self, instance_id: str, bootstrap_data: bytes, bootstrap_version: str) -> None:
        """Start a stopped warm instance: it runs ``startDelaySeconds`` from now, with
        ``bootstrap_data`` as its user data (one merge patch of its launch). One that is not
        stopped (started already, gone) is left as it is."""
        await self._weather("start")
        record = self._records.get(instance_id) or await self._read(instance_id)
        now = now_utc()
        if record is None or record.state_at(now) != STOPPED:
            return
        start_at = now + timedelta(seconds=self.settings.start_delay)
        patch = start_patch(record, start_at, bootstrap_data, bootstrap_version)
        with contextlib.suppress(NotFound):
            await self.client.patch(SECRETS, record.launch, patch, self.namespace)
        self._after("start")

    async def delete(self, instance_id: str) -> None:
        """Terminate. The pool's highest ordinal stays as a tombstone, so no id is ever
        reused; any other instance leaves its launch at once, one request instead of a
        tombstone now and a purge later (the node simulator deletes the Node of an instance
        that left its launch too)."""
        await self._weather("delete")
        doomed = self._records.get(instance_id)
        if doomed is not None and doomed.index < self._records.top_index():
            await self._remove(doomed)
        else:
            # The top one, or one the informer does not show yet: marked, purged later.
            doomed = doomed or await self._read(instance_id)
            if doomed is not None:
                with contextlib.suppress(NotFound):
                    patch = state_patch(doomed, TERMINATED)
                    await self.client.patch(SECRETS, doomed.launch, patch, self.namespace)
        self._after("delete")

    async def _read(self, instance_id: str) -> InstanceRecord | None:
        """``instance_id``'s record read from the server, for one just launched."""
        for name in launch_names(instance_id, self.pool):
            try:
                secret = await self.client.get(SECRETS, name, self.namespace)
            except NotFound:
                continue
            found = record_in(secret, instance_id)
            if found is not None:
                return found
        return None

    async def purge(self, instance_id: str) -> None:
        """Remove a terminated instance's record for good."""
        record = self._records.get(instance_id)
        if record is not None:
            await self._remove(record)

    async def _remove(self, record: InstanceRecord) -> None:
        """Take ``record`` out of its launch: the whole Secret when the informer shows it
        holds no other instance, else a patch dropping only its entries. Two removals at
        once may each leave the other's; a launch left with no instance is deleted the next
        time its pool is listed (``list``)."""
        launch = self._records.launch(record.launch)
        alone = launch is not None and instance_ids(launch) == [record.id]
        if record.legacy or alone:
            # Locked on the version seen: instances launched into it since stay.
            version = None if record.legacy else launch_version(launch)
            with contextlib.suppress(Conflict):
                await self.client.delete(
                    SECRETS, record.launch, self.namespace, uid=record.uid, resource_version=version
                )
                return
        with contextlib.suppress(NotFound):
            await self.client.patch(SECRETS, record.launch, removal_patch(record), self.namespace)

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


class _Launches:
    """The creates of one backend that arrive together, written together.

    The engine sends a step's creates at once (``gather_bounded``). The first to arrive
    yields once, so every create already started joins it, then writes them all: one request
    per launch block they fall in (``launch_name``), a create of the block's Secret or a patch
    adding them to it. The patch is locked on the version whose instances were compared, so
    a retried create returns the instance it made instead of launching it twice. Writes to
    one block take turns, each from the version the last one wrote (the informer may not
    show it yet), so the creates of one pool never conflict with each other; an instance
    leaving the block meanwhile costs a read and another attempt.
    """

    _ATTEMPTS = 5

    def __init__(self, backend: SimBackend) -> None:
        self._backend = backend
        self._waiting: list[_Waiting] = []
        self._turns: dict[str, asyncio.Lock] = {}
        self._written: dict[str, Obj] = {}

    async def add(self, record: InstanceRecord, spec: InstanceSpec) -> InstanceRecord:
        """Launch ``record`` (booted with ``spec``'s data); the record as stored."""
        future: asyncio.Future[InstanceRecord] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(record, spec, future))
        if len(self._waiting) == 1:
            await asyncio.sleep(0)  # the creates started with this one arrive
            batch, self._waiting = self._waiting, []
            blocks: dict[str, list[_Waiting]] = {}
            for waiting in batch:
                blocks.setdefault(launch_name(waiting.record), []).append(waiting)
            try:
                await gather_bounded(self._write(name, items) for name, items in blocks.items())
            finally:
                for waiting in batch:
                    if not waiting.future.done():
                        waiting.future.set_exception(
                            CloudError(f"launch of {waiting.record.id} was interrupted")
                        )
        return await future

    async def _write(self, name: str, items: list[_Waiting]) -> None:
        async with self._turns.setdefault(name, asyncio.Lock()):
            await self._write_in_turn(name, items)

    async def _write_in_turn(self, name: str, items: list[_Waiting]) -> None:
        backend = self._backend
        client, namespace = backend.client, backend.namespace
        launch = self._written.get(name) or backend._records.launch(name)
        for _ in range(self._ATTEMPTS):
            if launch is not None:
                items = _resolve_stored(items, launch)
            if not items:
                return
            entries: dict[str, str] = {}
            for waiting in items:
                entries |= launch_entries(waiting.record, waiting.spec.bootstrap_data)
            try:
                if launch is None:
                    body = launch_secret(
                        items[0].record,
                        entries,
                        labels=items[0].spec.labels,
                        owner=backend.owner,
                    )
                    written = await client.create(SECRETS, body, namespace)
                else:
                    patch = {
                        "metadata": {"resourceVersion": launch_version(launch)},
                        "data": entries,
                    }
                    written = await client.patch(SECRETS, name, patch, namespace)
            except (Conflict, NotFound):  # made, changed or gone since seen: look again
                try:
                    launch = await client.get(SECRETS, name, namespace)
                except NotFound:
                    launch = None
                continue
            self._written[name] = written
            items = _resolve_stored(items, written)
            break
        for waiting in items:
            waiting.future.set_exception(
                CloudError(f"launch {name} changed under {self._ATTEMPTS} attempts to add to it")
            )


@dataclass(frozen=True)
class _Waiting:
    record: InstanceRecord
    spec: InstanceSpec
    future: asyncio.Future[InstanceRecord]


def _resolve_stored(items: list[_Waiting], launch: Obj) -> list[_Waiting]:
    """Settle the creates whose instance ``launch`` holds (a retry gets the instance it made,
    or ``_same_request``'s refusal); the rest, still to launch."""
    stored = {r.id: r for r in records_in(launch)}
    left: list[_Waiting] = []
    for waiting in items:
        have = stored.get(waiting.record.id)
        if have is None:
            left.append(waiting)
            continue
        try:
            _same_request(have, waiting.spec)
        except CloudError as exc:
            waiting.future.set_exception(exc)
        else:
            waiting.future.set_result(have)
    return left


def launch_version(launch: Obj | None) -> str | None:
    return str((launch or {}).get("metadata", {}).get("resourceVersion", "")) or None


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
    state = InstanceState(record.state_at(now))
    return Instance(
        id=record.id,
        provider_id=record.provider_id,
        failure_domain=record.failure_domain,
        state=state,
        template_hash=record.template_hash,
        created=record.created,
        bootstrap_version=record.bootstrap_version,
        index=record.index,
        warm=record.warm and record.start_at is None and state is not InstanceState.TERMINATED,
    )
