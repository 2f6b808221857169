"""The sim provider's cached views: one pool's records decoded once per resourceVersion, and
the faults ConfigMaps from a watch (with a read from the server until it has listed)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from tests.support import eventually

from machinepool.providers.sim.poolrecords import PoolRecords
from machinepool.runtime import (
    SECRETS,
    Informer,
    NotFound,
    Obj,
    ObjectList,
    Resource,
    WatchEvent,
)
from machinepool.simworld import Faults
from machinepool.simworld.cloud import FAULTS_CONFIGMAP
from machinepool.simworld.faults import FaultsWatch
from machinepool.simworld.instances import InstanceEvents
from machinepool.simworld.records import POOL_ANNOTATION, STATE_ANNOTATION


class FakeApi:
    """Just enough of ``Client`` for an informer: one list, then the events fed to it."""

    def __init__(self, items: list[Obj]) -> None:
        self.items = items
        self.events: asyncio.Queue[WatchEvent] = asyncio.Queue()
        self.list_calls: list[str | None] = []
        self.gets: list[tuple[str, str | None]] = []

    async def list(self, res: Resource, namespace: str | None = None, **kw: Any) -> ObjectList:
        self.list_calls.append(kw.get("field_selector"))
        return ObjectList(items=[dict(o) for o in self.items], resource_version="1")

    def watch(self, res: Resource, namespace: str | None = None, **kw: Any) -> Any:
        async def stream() -> AsyncIterator[WatchEvent]:
            while True:
                yield await self.events.get()

        return stream()

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        self.gets.append((name, namespace))
        for obj in self.items:
            if obj["metadata"]["name"] == name and obj["metadata"].get("namespace") == namespace:
                return obj
        raise NotFound(404, "NotFound", f"{name} not found")


def record(name: str, pool: str, rv: str, *, annotated: bool = True) -> Obj:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    info = {"pool": pool, "index": int(name.rsplit("-", 1)[1]), "createdAt": now, "bootAt": now}
    meta: Obj = {"name": name, "namespace": "ns", "resourceVersion": rv, "uid": name}
    if annotated:
        meta["annotations"] = {POOL_ANNOTATION: pool}
    return {
        "metadata": meta,
        "data": {"instance.json": base64.b64encode(json.dumps(info).encode()).decode()},
    }


@contextlib.asynccontextmanager
async def synced_records(api: FakeApi) -> AsyncIterator[PoolRecords]:
    """``PoolRecords`` over an informer of ``api``'s Secrets, listed."""
    informer = Informer(api, SECRETS)  # type: ignore[arg-type]
    records = PoolRecords(informer)
    await informer.start()
    try:
        await informer.wait_synced()
        yield records
    finally:
        await informer.stop()


async def test_pool_records_index_by_pool_and_decode_once_per_version() -> None:
    api = FakeApi(
        [record("a-1", "a", "1"), record("a-2", "a", "2"), record("b-1", "b", "3", annotated=False)]
    )
    async with synced_records(api) as records:
        first = records.of_pool("ns", "a")
        assert sorted(r.id for r in first) == ["a-1", "a-2"]
        assert [r.id for r in records.of_pool("ns", "b")] == ["b-1"]  # pool from instance.json
        again = {r.id: r for r in records.of_pool("ns", "a")}
        assert all(again[r.id] is r for r in first), "unchanged records are not decoded again"

        changed = record("a-1", "a", "9")
        changed["metadata"]["annotations"][STATE_ANNOTATION] = "failed"
        await api.events.put(WatchEvent("MODIFIED", changed))
        await eventually(lambda: any(r.forced_state for r in records.of_pool("ns", "a")))
        await api.events.put(WatchEvent("DELETED", record("a-2", "a", "10")))
        await eventually(lambda: [r.id for r in records.of_pool("ns", "a")] == ["a-1"])
        assert len(records) == 2, "a deleted record is forgotten"


async def test_pool_records_keep_the_top_ordinal_as_records_come_and_go() -> None:
    api = FakeApi([record("a-1", "a", "1"), record("a-3", "a", "2"), record("b-5", "b", "3")])
    async with synced_records(api) as records:
        pool = records.of("ns", "a")
        assert pool.top_index() == 3
        found = pool.get("a-1")
        assert found is not None
        assert found.index == 1
        assert pool.get("b-5") is None, "another pool's record is not this pool's"
        assert records.of("ns", "c").top_index() == 0

        await api.events.put(WatchEvent("ADDED", record("a-7", "a", "4")))
        await eventually(lambda: pool.top_index() == 7)
        await api.events.put(WatchEvent("DELETED", record("a-1", "a", "5")))
        await eventually(lambda: pool.get("a-1") is None)
        assert pool.top_index() == 7
        await api.events.put(WatchEvent("DELETED", record("a-7", "a", "6")))
        await eventually(lambda: pool.top_index() == 3)


async def test_faults_watch_reads_until_listed_then_follows_the_watch() -> None:
    cm = {"metadata": {"name": FAULTS_CONFIGMAP, "namespace": "ns", "resourceVersion": "1"}}
    cm["data"] = Faults(error_rate=0.5).to_configmap()
    api = FakeApi([cm])
    watch = FaultsWatch(api)  # type: ignore[arg-type]
    assert await watch.faults("ns") == Faults(error_rate=0.5)
    assert api.gets == [(FAULTS_CONFIGMAP, "ns")], "not running yet: read from the server"

    task = asyncio.create_task(watch.run())
    try:
        await eventually(lambda: watch._informer is not None and watch._informer.has_synced)
        assert api.list_calls == [f"metadata.name={FAULTS_CONFIGMAP}"]
        assert await watch.faults("ns") == Faults(error_rate=0.5)
        assert await watch.faults("other") == Faults()
        assert len(api.gets) == 1, "answered from the watch"

        updated = {**cm, "metadata": {**cm["metadata"], "resourceVersion": "2"}}
        updated["data"] = Faults(stall_rate=1.0, stall_seconds=2.0).to_configmap()
        await api.events.put(WatchEvent("MODIFIED", updated))
        informer = watch._informer
        assert informer is not None
        await eventually(lambda: informer.get(FAULTS_CONFIGMAP, "ns")["data"] == updated["data"])  # type: ignore[index]
        assert await watch.faults("ns") == Faults(stall_rate=1.0, stall_seconds=2.0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert watch._informer is None, "cancelled: the informer is stopped and not served"


def launch(rv: str, *entries: tuple[str, str]) -> Obj:
    """A launch Secret of pool ``a`` holding ``(instance id, state)`` entries."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    data: dict[str, str] = {}
    for instance_id, state in entries:
        info = {"pool": "a", "index": int(instance_id.rsplit("-", 1)[1]), "createdAt": now}
        data[f"{instance_id}.json"] = base64.b64encode(json.dumps(info).encode()).decode()
        if state:
            data[f"{instance_id}.state"] = base64.b64encode(state.encode()).decode()
    meta = {"name": "a-launch-0", "namespace": "ns", "resourceVersion": rv, "uid": "u"}
    return {"metadata": {**meta, "annotations": {POOL_ANNOTATION: "a"}}, "data": data}


class Recorded:
    """An inner handler that notes the instance events it gets."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def on_add(self, obj: Obj, initial: bool = False) -> None:
        self.events.append(("add", obj["metadata"]["name"]))

    def on_update(self, old: Obj, new: Obj) -> None:
        assert old["metadata"]["name"] == new["metadata"]["name"]
        self.events.append(("update", new["metadata"]["name"]))

    def on_delete(self, obj: Obj) -> None:
        self.events.append(("delete", obj["metadata"]["name"]))


def test_a_launchs_events_reach_only_the_instances_they_change() -> None:
    """The node simulator reconciles instances: a change of one instance of a launch wakes
    that one, not the launch's every instance."""
    inner = Recorded()
    events = InstanceEvents(inner)
    first = launch("1", ("a-1", ""), ("a-2", ""), ("a-3", ""))
    events.on_add(first)
    assert sorted(inner.events) == [("add", "a-1"), ("add", "a-2"), ("add", "a-3")]

    inner.events.clear()
    failed = launch("2", ("a-1", ""), ("a-2", "failed"), ("a-3", ""))
    events.on_update(first, failed)
    assert inner.events == [("update", "a-2")]

    inner.events.clear()
    left = launch("3", ("a-1", ""), ("a-2", "failed"))
    events.on_update(failed, left)
    assert inner.events == [("delete", "a-3")]

    inner.events.clear()
    events.on_delete(left)
    assert sorted(inner.events) == [("delete", "a-1"), ("delete", "a-2")]


async def test_instances_of_a_launch_are_found_by_id_pool_and_address() -> None:
    api = FakeApi([launch("1", ("a-1", ""), ("a-2", ""))])
    async with synced_records(api) as records:
        pool = records.of("ns", "a")
        assert sorted(r.id for r in pool.all()) == ["a-1", "a-2"]
        found = pool.get("a-2")
        assert found is not None
        assert found.launch == "a-launch-0"
        assert pool.top_index() == 2
        await api.events.put(WatchEvent("MODIFIED", launch("2", ("a-2", "terminated"))))
        await eventually(lambda: pool.get("a-1") is None)
        kept = pool.get("a-2")
        assert kept is not None
        assert kept.forced_state == "terminated"
        assert pool.empty_launches() == []
        await api.events.put(WatchEvent("MODIFIED", launch("3")))
        await eventually(
            lambda: [s["metadata"]["name"] for s in pool.empty_launches()] == ["a-launch-0"]
        )
