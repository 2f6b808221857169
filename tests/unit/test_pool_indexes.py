"""The pool engine finds a pool's infra machines and their Machines through indexes, not by
scanning the namespace: owners by kind and name, Machines by their infrastructureRef."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from tests.support.resources import MACHINES, SIM_MACHINES

from machinepool.providers.pool.observe import (
    INFRA_REF_INDEX,
    ensure_member_indexes,
    machine_to_pools,
    owner_machines,
    pool_keys,
    pool_members,
)
from machinepool.runtime import Informer, Obj, ObjectKey, ObjectList, Resource


class ListOnly:
    """A client whose list returns ``items`` and whose watch never sends anything."""

    def __init__(self, items: list[Obj]) -> None:
        self.items = items

    async def list(self, res: Resource, namespace: str | None = None, **kw: Any) -> ObjectList:
        return ObjectList(items=self.items, resource_version="1")

    def watch(self, res: Resource, namespace: str | None = None, **kw: Any) -> Any:
        async def stream() -> AsyncIterator[Any]:
            await asyncio.Event().wait()
            yield

        return stream()


def infra(name: str, namespace: str, *owners: tuple[str, str]) -> Obj:
    refs = [{"kind": kind, "name": owner} for kind, owner in owners]
    return {"metadata": {"name": name, "namespace": namespace, "ownerReferences": refs}}


def machine(name: str, namespace: str, kind: str, ref: str) -> Obj:
    spec = {"infrastructureRef": {"kind": kind, "name": ref}}
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


async def synced(resource: Resource, items: list[Obj]) -> Informer:
    informer = Informer(ListOnly(items), resource)  # type: ignore[arg-type]
    await informer.start()
    await informer.wait_synced()
    return informer


async def test_pool_members_and_their_machines_by_index() -> None:
    infra_machines = await synced(
        SIM_MACHINES,
        [
            infra("p-2", "ns", ("SimMachinePool", "p")),
            infra("p-1", "ns", ("SimMachinePool", "p")),
            infra("q-1", "ns", ("SimMachinePool", "q")),
            infra("p-1", "other", ("SimMachinePool", "p")),
            infra("x-1", "ns", ("ConfigMap", "p")),  # another kind named p: not a member
        ],
    )
    machines = await synced(
        MACHINES,
        [
            machine("p-1", "ns", "SimMachine", "p-1"),
            machine("m", "ns", "OtherMachine", "p-2"),
            machine("p-1", "other", "SimMachine", "p-1"),
        ],
    )
    try:
        ensure_member_indexes(infra_machines, "SimMachinePool", machines)
        ensure_member_indexes(infra_machines, "SimMachinePool", machines)  # idempotent
        members = pool_members(infra_machines, ObjectKey("ns", "p"))
        assert [m["metadata"]["name"] for m in members] == ["p-1", "p-2"]
        found = machines.by_index(INFRA_REF_INDEX, "ns/SimMachine/p-1")
        assert [ObjectKey.of(m) for m in found] == [ObjectKey("ns", "p-1")]
        assert machines.by_index(INFRA_REF_INDEX, "ns/SimMachine/p-2") == []
    finally:
        await infra_machines.stop()
        await machines.stop()


async def test_owner_machines_and_pool_keys_for_any_provider_kind() -> None:
    """The lookups the pool engine and the AWS provider share, parameterised by kinds."""
    infra_machines = await synced(
        SIM_MACHINES,
        [
            infra("p-i1", "ns", ("AWSMachinePool", "p")),
            infra("q-i2", "ns", ("AWSMachinePool", "q"), ("SimMachinePool", "q")),
        ],
    )
    machines = await synced(
        MACHINES,
        [
            machine("m1", "ns", "AWSMachine", "p-i1"),
            machine("p-i1", "ns", "SimMachine", "p-i1"),  # same name, another kind
        ],
    )
    try:
        ensure_member_indexes(infra_machines, "AWSMachinePool", machines)
        p_i1 = infra_machines.get("p-i1", "ns")
        assert p_i1 is not None
        owners = owner_machines(machines, "AWSMachine", p_i1)
        assert [m["metadata"]["name"] for m in owners] == ["m1"]
        q_i2 = infra_machines.get("q-i2", "ns")
        assert q_i2 is not None
        assert owner_machines(machines, "AWSMachine", q_i2) == []
        assert pool_keys(q_i2, "AWSMachinePool") == [ObjectKey("ns", "q")]
        assert pool_keys(q_i2, "OtherPool") == []
        m1 = machines.get("m1", "ns")
        assert m1 is not None
        assert machine_to_pools(m1, infra_machines, "AWSMachine", "AWSMachinePool") == [
            ObjectKey("ns", "p")
        ]
        assert machine_to_pools(m1, infra_machines, "SimMachine", "AWSMachinePool") == []
    finally:
        await infra_machines.stop()
        await machines.stop()
