"""Every filtered watch of the pool engine passes each change its reconcile reads.

The engine's watches drop updates that change nothing a pool reconcile reads: its own pools,
infra machines, the pool's Machines and MachinePool pass only metadata and spec changes
(``metadata_and_spec``), Nodes only their providerID and readiness (``observe.node_inputs``).
Here real reconciles of a Running Sim pool, idle and in a rollout, record what they read of
each object they are woken by (``tests.support.reads``), and each filter must notice a change
of each of those fields; in a rollout, a Machine's Ready condition wakes its pool through a
second watch. A field left out on purpose is named in ``EXEMPT`` with why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pprint import pformat

from tests.support.reads import Path, recording, unnoticed
from tests.support.resources import MACHINE_POOLS

from machinepool.api.meta import dig
from machinepool.api.views import MachineView
from machinepool.providers.pool.observe import machine_ready, node_inputs
from machinepool.runtime import NODES, Informer, Obj, ObjectKey, metadata_and_spec

from .conftest import System

ENGINE_WRITES = "written by the pool engine alone, which reads its own writes"
EXEMPT: dict[str, dict[Path, str]] = {
    "simmachinepools": {("status",): ENGINE_WRITES},
    "simmachines": {("status",): ENGINE_WRITES},
}
IDLE_EXEMPT: dict[str, dict[Path, str]] = {
    "machines": {
        ("status", "conditions", "[Ready]"): (
            "outside a rollout a Machine's readiness only orders the victims of a scale-down,"
            " which a change of the MachinePool (its own event) starts with a fresh read"
        ),
    },
}


async def test_every_watch_passes_what_a_pool_reconcile_reads(system: System) -> None:
    ns = system.namespace
    await system.create_pool("inputs", 2)
    await system.until(lambda: system.pool_running("inputs", 2), "the pool running 2 Nodes")
    env = system.engine.env
    key = ObjectKey(ns, "inputs")
    cluster = ObjectKey(ns, system.cluster)
    nodes = await system.cluster_cache.get_informer(cluster, NODES)
    infra_machine = next(m for m in env.infra_machines.list(ns))
    name = str(infra_machine["metadata"]["name"])
    machine = env.machines.get(name, ns)
    assert machine is not None
    node_name = str((machine.get("status") or {}).get("nodeRef", {}).get("name", ""))
    watched: list[tuple[Informer, ObjectKey, Callable[[Obj], object]]] = [
        (env.pools, key, metadata_and_spec),
        (env.infra_machines, ObjectKey(ns, name), metadata_and_spec),
        (env.machines, ObjectKey(ns, name), metadata_and_spec),
        (env.machine_pools, key, metadata_and_spec),
        (nodes, ObjectKey("", node_name), node_inputs),
    ]
    missed: dict[str, set[Path]] = {}

    async def reconcile_recorded(state: str, exempt: dict[str, dict[Path, str]]) -> None:
        with contextlib.ExitStack() as stack:
            reads = [stack.enter_context(recording(inf, k)) for inf, k, _ in watched]
            await system.engine.reconcile(key)
        for (informer, k, inputs), read in zip(watched, reads, strict=True):
            obj = informer.get_key(k)
            assert obj is not None
            plural = informer.resource.plural
            allowed = {**EXEMPT.get(plural, {}), **exempt.get(plural, {})}
            if found := unnoticed(inputs, obj, read, exempt=allowed):
                missed[f"{state}: {plural} {k}"] = found

    await reconcile_recorded("idle", IDLE_EXEMPT)
    patch = {"spec": {"template": {"spec": {"version": "v1.34.4"}}}}
    await system.client.patch(MACHINE_POOLS, "inputs", patch, ns)
    await system.until(
        lambda: (
            dig(env.machine_pools.get("inputs", ns), "spec", "template", "spec", "version")
            == "v1.34.4"
        ),
        "the engine's cache showing the new version",
    )
    # In a rollout a Machine turning Ready wakes its pool too: the availability floor counts
    # Ready Machines (``PoolEngine.machine_turned_ready``, a second watch of Machines).
    watched[2] = (
        env.machines,
        ObjectKey(ns, name),
        lambda m: (metadata_and_spec(m), machine_ready(MachineView(m))),
    )
    await reconcile_recorded("rolling", {})
    assert missed == {}, f"read by the reconcile, but no event would say so: {pformat(missed)}"
