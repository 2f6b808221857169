"""OwnReader: a reconciler reads its object from the informer, never older than its own write;
Patcher: a patch that replaces a list is locked to the copy it was computed from.

Real control plane. The informer is stopped to hold it behind the server, which is what a
watch event still in flight looks like to the next reconcile.
"""

from __future__ import annotations

import pytest
from tests.support import eventually
from tests.support.resources import SIM_MACHINE_POOLS

from machinepool.runtime import (
    CONFIGMAPS,
    Client,
    Conflict,
    Informer,
    NotFound,
    ObjectKey,
    OwnReader,
    Patcher,
)


def _value(informer: Informer, namespace: str) -> str | None:
    obj = informer.get("c", namespace)
    return None if obj is None else str(obj["data"]["v"])


async def test_reads_own_write_until_the_informer_catches_up(
    client: Client, namespace: str
) -> None:
    await client.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"v": "0"}}, namespace)
    informer = Informer(client, CONFIGMAPS, namespace)
    reader = OwnReader(client, CONFIGMAPS, informer)
    key = ObjectKey(namespace, "c")
    await informer.start()
    try:
        await eventually(lambda: _value(informer, namespace) == "0")

        copy = await reader.get(key)
        assert copy is not None
        copy["data"]["v"] = "mutated"
        assert _value(informer, namespace) == "0", "a read is a private copy"

        await informer.stop()  # the informer now lags every write below
        obj = await reader.get(key)
        assert obj is not None
        patcher = Patcher(client, CONFIGMAPS, obj, on_patched=reader.wrote)
        obj["data"]["v"] = "1"
        await patcher.patch(obj)
        assert _value(informer, namespace) == "0"
        read = await reader.get(key)
        assert read is not None
        assert read["data"]["v"] == "1", "our write, not the stale cache"
        assert len(reader) == 1

        # Someone else writes after us; once the informer has it, that newer copy wins.
        await client.patch(CONFIGMAPS, "c", {"data": {"v": "2"}}, namespace)
        await informer.start()
        await eventually(lambda: _value(informer, namespace) == "2")
        read = await reader.get(key)
        assert read is not None
        assert read["data"]["v"] == "2"
        assert len(reader) == 0, "the remembered write is dropped once the informer caught up"

        await client.delete(CONFIGMAPS, "c", namespace)
        await eventually(lambda: informer.get("c", namespace) is None)
        assert await reader.get(key) is None
    finally:
        await informer.stop()


async def test_a_patch_that_sends_nothing_remembers_nothing(client: Client, namespace: str) -> None:
    await client.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"v": "0"}}, namespace)
    informer = Informer(client, CONFIGMAPS, namespace)
    reader = OwnReader(client, CONFIGMAPS, informer)
    await informer.start()
    try:
        await eventually(lambda: _value(informer, namespace) == "0")
        obj = await reader.get(ObjectKey(namespace, "c"))
        assert obj is not None
        await Patcher(client, CONFIGMAPS, obj, on_patched=reader.wrote).patch(obj)
        assert len(reader) == 0
    finally:
        await informer.stop()


async def test_a_patch_replacing_a_list_does_not_undo_a_newer_change(
    client: Client, namespace: str
) -> None:
    """Lists are replaced whole by a merge patch, so the patch is locked to its snapshot."""
    body = {"metadata": {"name": "c", "finalizers": ["a.example/one"]}, "data": {"v": "0"}}
    stale = await client.create(CONFIGMAPS, body, namespace)
    await client.patch(
        CONFIGMAPS,
        "c",
        {"metadata": {"finalizers": ["a.example/one", "b.example/two"]}},
        namespace,
    )
    patcher = Patcher(client, CONFIGMAPS, stale)
    stale["metadata"]["finalizers"] = ["a.example/one", "c.example/three"]
    with pytest.raises(Conflict):
        await patcher.patch(stale)

    # A map-only change needs no lock: it merges with whatever changed meanwhile.
    patcher = Patcher(client, CONFIGMAPS, stale := await client.get(CONFIGMAPS, "c", namespace))
    await client.patch(CONFIGMAPS, "c", {"data": {"w": "other writer"}}, namespace)
    stale["data"]["v"] = "1"
    await patcher.patch(stale)
    now = await client.get(CONFIGMAPS, "c", namespace)
    assert now["data"] == {"v": "1", "w": "other writer"}
    assert now["metadata"]["finalizers"] == ["a.example/one", "b.example/two"]
    await client.patch(CONFIGMAPS, "c", {"metadata": {"finalizers": None}}, namespace)


async def test_own_spec_write_is_observed_in_the_same_patch(
    client: Client, namespace: str, crds: list[str]
) -> None:
    """A reconcile that writes spec (a copied providerIDList) and sets observedGeneration to
    the generation it read ends with observedGeneration equal to the generation its own
    write made: no second reconcile and status patch just to catch up."""
    body = {
        "apiVersion": SIM_MACHINE_POOLS.api_version,
        "kind": SIM_MACHINE_POOLS.kind,
        "metadata": {"name": "p"},
        "spec": {"template": {"instanceType": "sim.small"}},
    }
    obj = await client.create(SIM_MACHINE_POOLS, body, namespace)
    patcher = Patcher(client, SIM_MACHINE_POOLS, obj)
    read = obj["metadata"]["generation"]
    obj["spec"]["providerIDList"] = ["sim:///z/a"]
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": ""}
    ready["observedGeneration"] = read
    ready["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    obj["status"] = {"observedGeneration": read, "replicas": 1, "conditions": [ready]}
    latest = await patcher.patch(obj)
    stored = await client.get(SIM_MACHINE_POOLS, "p", namespace)
    assert stored["metadata"]["generation"] == read + 1
    assert stored["status"]["observedGeneration"] == read + 1
    assert stored["status"]["conditions"][0]["observedGeneration"] == read + 1
    assert latest["status"]["observedGeneration"] == read + 1

    # Someone else's spec change in between: the generation moves by two, and the status
    # does not claim to have seen a spec this reconcile never read.
    patcher = Patcher(client, SIM_MACHINE_POOLS, latest)
    read = latest["metadata"]["generation"]
    await client.patch(
        SIM_MACHINE_POOLS, "p", {"spec": {"template": {"image": "other"}}}, namespace
    )
    latest["spec"]["template"]["instanceType"] = "sim.large"  # a map: merged, not locked
    latest["status"]["observedGeneration"] = read
    await patcher.patch(latest)
    stored = await client.get(SIM_MACHINE_POOLS, "p", namespace)
    assert stored["metadata"]["generation"] == read + 2
    assert stored["status"]["observedGeneration"] == read


async def test_releasing_the_last_finalizer_sends_no_status_patch(
    client: Client, namespace: str, crds: list[str]
) -> None:
    """The object is gone once its last finalizer goes: the patch returns cleanly instead of
    sending a status patch that could only fail with NotFound."""
    body = {
        "apiVersion": SIM_MACHINE_POOLS.api_version,
        "kind": SIM_MACHINE_POOLS.kind,
        "metadata": {"name": "q", "finalizers": ["example.com/hold"]},
        "spec": {"template": {"instanceType": "sim.small"}},
    }
    await client.create(SIM_MACHINE_POOLS, body, namespace)
    await client.delete(SIM_MACHINE_POOLS, "q", namespace)
    obj = await client.get(SIM_MACHINE_POOLS, "q", namespace)
    patcher = Patcher(client, SIM_MACHINE_POOLS, obj)
    obj["metadata"]["finalizers"] = []
    obj["status"] = {"ready": False}
    await patcher.patch(obj)  # raised NotFound from the status patch before
    with pytest.raises(NotFound):
        await client.get(SIM_MACHINE_POOLS, "q", namespace)


async def test_a_status_patch_that_lost_its_lock_keeps_the_other_writers_conditions(
    client: Client, namespace: str, crds: list[str]
) -> None:
    """Another client writes spec and a condition of its own between our read and our status
    patch (a MachineHealthCheck marking a Machine the Machine controller is patching): the
    list lock refuses our stale conditions list, and the patcher rebases our change onto the
    newer copy instead of undoing theirs or failing the reconcile."""
    body = {
        "apiVersion": SIM_MACHINE_POOLS.api_version,
        "kind": SIM_MACHINE_POOLS.kind,
        "metadata": {"name": "s"},
        "spec": {"template": {"instanceType": "sim.small"}},
    }
    time = {"lastTransitionTime": "2026-01-01T00:00:00Z"}
    ours = {"type": "Ready", "status": "True", "reason": "Ready", "message": "", **time}
    mark = {"type": "HealthCheckSucceeded", "status": "False", "reason": "X", "message": "", **time}
    obj = await client.create(SIM_MACHINE_POOLS, body, namespace)
    obj = await client.patch(
        SIM_MACHINE_POOLS, "s", {"status": {"conditions": [ours]}}, namespace, subresource="status"
    )
    patcher = Patcher(client, SIM_MACHINE_POOLS, obj)
    await client.patch(SIM_MACHINE_POOLS, "s", {"spec": {"template": {"image": "x"}}}, namespace)
    await client.patch(
        SIM_MACHINE_POOLS,
        "s",
        {"status": {"conditions": [ours, mark]}},
        namespace,
        subresource="status",
    )
    obj["status"] = {"conditions": [{**ours, "message": "ours"}], "replicas": 2}
    await patcher.patch(obj)
    stored = await client.get(SIM_MACHINE_POOLS, "s", namespace)
    assert stored["status"]["conditions"] == [{**ours, "message": "ours"}, mark]
    assert stored["status"]["replicas"] == 2
    assert stored["spec"]["template"]["image"] == "x", "their spec write kept"
