"""The Sim cloud's launches against a real apiserver: the creates of one engine step are one
write per block of ordinals, a create retried on a stale view finds the instance it made
instead of launching it again, and instances leave their launch one patch each, the last one
taking the Secret with it while the pool's top ordinal stays as a tombstone. A record of the
one-instance format an earlier version wrote is still served. The writes are counted on the
way to the real apiserver (``Sim.writes``); the ``Blind`` view stands for the records informer
before it has seen a launch, nothing of the API."""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import pytest
import pytest_asyncio
from tests.support import eventually

from machinepool.api.views import SimSettingsView
from machinepool.providers.pool.types import Instance, InstanceSpec, InstanceState
from machinepool.providers.sim.backend import SimBackend, SimPoolSettings
from machinepool.providers.sim.poolrecords import OnePool, PoolRecords
from machinepool.runtime import CONFIGMAPS, SECRETS, Client, Informer, Obj, gather_bounded
from machinepool.simworld import Faults, SimCloud
from machinepool.simworld.records import (
    INSTANCE_LABEL,
    LAUNCH_SIZE,
    POOL_ANNOTATION,
    STATE_ANNOTATION,
    records_in,
)

POOL = "web"
FIRST = LAUNCH_SIZE - 5
"""A step of 12 from here crosses into the second block: two launches."""


class Sim:
    """A pool's backend over a live records informer, and the writes it sent by verb."""

    def __init__(self, client: Client, namespace: str, records: PoolRecords, owner: Obj):
        self.client, self.namespace, self.records, self.owner = client, namespace, records, owner
        self.writes: Counter[str] = Counter()

    def backend(self, records: Any = None) -> SimBackend:
        quick = SimPoolSettings(SimSettingsView({"bootDelaySeconds": 0}))
        return SimBackend(
            self.client,
            records if records is not None else self.records.of(self.namespace, POOL),
            namespace=self.namespace,
            pool=POOL,
            cluster="work",
            owner=self.owner,
            settings=quick,
            faults=Faults(),
            zones=("zone-a",),
        )

    async def launches(self) -> dict[str, list[str]]:
        """Each launch Secret's instance ids, read from the server."""
        listed = await self.client.list(SECRETS, self.namespace, label_selector=INSTANCE_LABEL)
        return {s["metadata"]["name"]: [r.id for r in records_in(s)] for s in listed.items}


class Blind:
    """A pool's records as an informer that has seen nothing yet shows them."""

    def all(self) -> list[Any]:
        return []

    def get(self, instance_id: str) -> None:
        return None

    def top_index(self) -> int:
        return 0

    def launch(self, name: str) -> None:
        return None

    def empty_launches(self) -> list[Obj]:
        return []


@pytest_asyncio.fixture(loop_scope="session")
async def sim(
    client: Client, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Sim]:
    # The records' owner: any object that exists, so garbage collection leaves them be.
    owner = await client.create(CONFIGMAPS, {"metadata": {"name": POOL}}, namespace)
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": POOL, "uid": owner["metadata"]["uid"]}
    informer = Informer(client, SECRETS, namespace, label_selector=INSTANCE_LABEL)
    records = PoolRecords(informer)
    await informer.start()
    await informer.wait_synced()
    sim = Sim(client, namespace, records, ref)
    send = client.request

    async def counted(method: str, path: str, **kw: Any) -> Obj:
        if "/secrets" in path and method != "GET":
            sim.writes[str(kw.get("verb"))] += 1
        return await send(method, path, **kw)

    monkeypatch.setattr(client, "request", counted)
    try:
        yield sim
    finally:
        await informer.stop()


def _left(pool: OnePool, name: str) -> bool:
    return pool.get(name) is None


def spec(index: int, data: bytes = b"#cloud-config") -> InstanceSpec:
    return InstanceSpec(
        pool_id=POOL,
        instance_id=f"{POOL}-abcde-{index}",
        index=index,
        failure_domain="zone-a",
        template_hash="h1",
        version="v1.34.4",
        bootstrap_data=data,
    )


async def step(backend: SimBackend, indexes: range) -> list[Instance]:
    """Creates sent together, as the pool engine sends one step's."""
    made = await gather_bounded(backend.create(spec(i)) for i in indexes)
    assert all(isinstance(m, Instance) for m in made), made
    return [m for m in made if isinstance(m, Instance)]


@pytest.mark.usefixtures("control_plane")
async def test_a_step_is_one_write_per_launch_and_a_retry_launches_nothing(sim: Sim) -> None:
    indexes = range(FIRST, FIRST + 12)
    made = await step(sim.backend(), indexes)
    assert sim.writes == {"create": 2}, "12 instances in two blocks: two launches"
    launches = await sim.launches()
    assert sorted(launches) == [f"{POOL}-abcde-launch-0", f"{POOL}-abcde-launch-1"]
    assert sorted(i for ids in launches.values() for i in ids) == sorted(
        spec(i).instance_id for i in indexes
    )
    assert len({m.provider_id for m in made}) == 12

    # A retry on a view that has not seen the launches yet finds each instance it made.
    sim.writes.clear()
    again = await step(sim.backend(Blind()), indexes)
    assert [(m.id, m.provider_id, m.created) for m in again] == [
        (m.id, m.provider_id, m.created) for m in made
    ]
    assert sim.writes == {"create": 2}, "two creates refused as existing, nothing written"
    assert await sim.launches() == launches

    # The next step into a block that exists adds to it: one patch, no second Secret.
    await eventually(lambda: len(sim.records.of_pool(sim.namespace, POOL)) == 12)
    sim.writes.clear()
    await step(sim.backend(), range(FIRST + 12, FIRST + 15))
    assert sim.writes == {"patch": 1}
    assert len((await sim.launches())[f"{POOL}-abcde-launch-1"]) == 10


@pytest.mark.usefixtures("control_plane")
async def test_instances_leave_their_launch_and_the_top_one_stays_terminated(sim: Sim) -> None:
    indexes = range(FIRST, FIRST + 8)  # 5 in the first block, 3 in the second
    await step(sim.backend(), indexes)
    await eventually(lambda: len(sim.records.of_pool(sim.namespace, POOL)) == 8)
    backend = sim.backend()
    sim.writes.clear()
    pool = sim.records.of(sim.namespace, POOL)
    for i in range(FIRST, LAUNCH_SIZE):
        name = spec(i).instance_id
        await backend.delete(name)
        await eventually(partial(_left, pool, name))
    assert sim.writes == {"patch": 4, "delete": 1}, "one write per instance, the last the Secret"
    assert sorted(await sim.launches()) == [f"{POOL}-abcde-launch-1"]

    top = spec(FIRST + 7).instance_id
    await backend.delete(top)
    await eventually(
        lambda: [i.id for i in sim.records.of_pool(sim.namespace, POOL) if i.forced_state] == [top]
    )
    listed = {i.id: i.state for i in await sim.backend().list(POOL)}
    assert listed[top] is InstanceState.TERMINATED
    assert len(listed) == 3


@pytest.mark.usefixtures("control_plane")
async def test_an_instance_the_view_does_not_show_yet_is_terminated_all_the_same(
    sim: Sim,
) -> None:
    """A delete right after a launch, before the informer shows it, reads the launch from the
    server rather than leave a running instance behind."""
    made = await step(sim.backend(), range(FIRST, FIRST + 3))
    await sim.backend(Blind()).delete(made[1].id)
    listed = await sim.client.list(SECRETS, sim.namespace, label_selector=INSTANCE_LABEL)
    states = {r.id: r.forced_state for s in listed.items for r in records_in(s)}
    assert states == {made[0].id: "", made[1].id: "terminated", made[2].id: ""}


@pytest.mark.usefixtures("control_plane")
async def test_a_record_an_earlier_version_wrote_is_still_served_after_an_upgrade(
    sim: Sim,
) -> None:
    """A cloud upgraded in place keeps the instances it had: a Secret of the one-instance
    format is listed, takes a fault in its own format and is removed whole."""
    old = next(iter(await step(sim.backend(), range(FIRST, FIRST + 1))))
    (launch,) = (await sim.client.list(SECRETS, sim.namespace, label_selector=INSTANCE_LABEL)).items
    (record,) = records_in(launch)
    info = base64.b64encode(json.dumps(record.info()).encode()).decode()
    legacy = {
        "metadata": {
            "name": "web-abcde-7",
            "labels": launch["metadata"]["labels"],
            "annotations": {POOL_ANNOTATION: POOL},
            "ownerReferences": [sim.owner],
        },
        "type": launch["type"],
        "data": {"instance.json": info, "userdata": base64.b64encode(b"#old").decode()},
    }
    await sim.client.create(SECRETS, legacy, sim.namespace)
    pool = sim.records.of(sim.namespace, POOL)
    await eventually(lambda: pool.get("web-abcde-7") is not None)
    assert {i.id for i in await sim.backend().list(POOL)} == {old.id, "web-abcde-7"}

    await SimCloud(sim.client).fail_instance(sim.namespace, "web-abcde-7")
    failed = await sim.client.get(SECRETS, "web-abcde-7", sim.namespace)
    assert failed["metadata"]["annotations"][STATE_ANNOTATION] == "failed"
    await eventually(lambda: (pool.get("web-abcde-7") or record).forced_state == "failed")

    await sim.backend().purge("web-abcde-7")
    assert await sim.launches() == {f"{POOL}-abcde-launch-0": [old.id]}
