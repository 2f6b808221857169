"""End to end: a rollout done by the core, on a Sim pool whose own strategy is off (OnDelete).

As a user would check it, from the watches: with the pool's strategy OnDelete and no opt-in, a
version bump replaces nothing; opted in (``machinepool.cluster.x-k8s.io/rollout: Core``) the
core replaces every outdated Machine, the ``delete-machine`` annotated one first, waiting on a
user's pre-drain hook, cordoning (draining) each Node before its infra machine, and so its
instance, goes, and never letting Ready Machines fall below replicas (maxUnavailable 0).
"""

from __future__ import annotations

from tests.e2e.conftest import System
from tests.support.conditions import condition, is_true
from tests.support.resources import MACHINE_POOLS, MACHINES, SIM_MACHINES

from machinepool.api import constants as c
from machinepool.runtime import FuncHandler, Obj

REPLICAS = 3
NEW = "v1.34.1"
USER_HOOK = f"{c.PRE_DRAIN_DELETE_HOOK_ANNOTATION_PREFIX}/user"


class Story:
    """What the watches showed during the rollout."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.fewest_ready = REPLICAS
        self.first_marked: str | None = None
        self.cordoned: set[str] = set()
        """providerIDs of Nodes seen unschedulable."""
        self.deleted: dict[str, str] = {}
        """Infra machines seen being deleted: name -> providerID."""

    def on_machine(self, machine: Obj) -> None:
        live = [
            m
            for m in self.system.machines("workers")
            if not m["metadata"].get("deletionTimestamp") and is_true(m, c.READY_CONDITION)
        ]
        self.fewest_ready = min(self.fewest_ready, len(live))
        marked = c.REPLACE_MACHINE_ANNOTATION in (machine["metadata"].get("annotations") or {})
        if marked and self.first_marked is None:
            self.first_marked = machine["metadata"]["name"]

    def on_node(self, node: Obj) -> None:
        if node["spec"].get("unschedulable"):
            self.cordoned.add(str(node["spec"].get("providerID")))

    def on_infra_machine(self, infra: Obj) -> None:
        if infra["metadata"].get("deletionTimestamp"):
            self.deleted.setdefault(infra["metadata"]["name"], str(infra["spec"].get("providerID")))

    def undrained(self) -> list[str]:
        """Infra machines deleted whose Node was never seen cordoned.

        The Node watch (the workload apiserver) and the SimMachine watch (the management one)
        deliver in no common order, so a Node is judged by whether it was cordoned at all: the
        Machine controller cordons it before it deletes the infra machine, and an instance the
        pool replaced on its own (its strategy, not the core) is never cordoned."""
        return sorted(name for name, pid in self.deleted.items() if pid not in self.cordoned)


async def test_the_core_rolls_an_on_delete_pool_drained_within_its_budget(system: System) -> None:
    await system.create_pool("workers", REPLICAS, strategy={"type": "OnDelete"})
    await system.until(lambda: system.pool_running("workers", REPLICAS), "3 Ready nodes")
    infra = await system.watch("simmachines", await system.manager.cache.get_informer(SIM_MACHINES))
    old = sorted(m["metadata"]["name"] for m in system.machines("workers"))
    patch = {"spec": {"template": {"spec": {"version": NEW}}}}
    await system.client.patch(MACHINE_POOLS, "workers", patch, system.namespace)

    def all_outdated() -> bool:
        items = [i for i in infra.list(system.namespace) if i["metadata"]["name"] in old]
        return len(items) == REPLICAS and all(
            condition(i, c.UP_TO_DATE_CONDITION).get("status") == "False" for i in items
        )

    await system.until(all_outdated, "the pool reporting its instances outdated")
    # Not opted in: the pool's strategy is off and the core leaves it alone.
    assert sorted(m["metadata"]["name"] for m in system.machines("workers")) == old
    assert not any(m["metadata"].get("deletionTimestamp") for m in system.machines("workers"))
    assert not condition(system.machine_pool("workers"), c.ROLLING_OUT_CONDITION)

    chosen, hooked = old[-1], old[0]
    for name, key in ((chosen, c.DELETE_MACHINE_ANNOTATION), (hooked, USER_HOOK)):
        body = {"metadata": {"annotations": {key: "yes"}}}
        await system.client.patch(MACHINES, name, body, system.namespace)
    story = Story(system)
    system.watched["machines"].add_handler(
        FuncHandler(story.on_machine, lambda _o, m: story.on_machine(m), story.on_machine)
    )
    system.nodes.add_handler(FuncHandler(story.on_node, lambda _o, n: story.on_node(n)))
    infra.add_handler(FuncHandler(update=lambda _o, i: story.on_infra_machine(i)))
    opt_in = {"metadata": {"annotations": {c.ROLLOUT_ANNOTATION: c.ROLLOUT_CORE}}}
    await system.client.patch(MACHINE_POOLS, "workers", opt_in, system.namespace)

    def hooked_deleting() -> bool:
        m = system.watched["machines"].get(hooked, system.namespace) or {}
        return bool(m.get("metadata", {}).get("deletionTimestamp"))

    await system.until(hooked_deleting, f"the core deleting {hooked}, held by the user's hook")
    node = system.node_of(hooked)
    assert node is not None
    assert not node["spec"].get("unschedulable"), "cordoned before the user's hook let go"
    await system.client.patch(
        MACHINES, hooked, {"metadata": {"annotations": {USER_HOOK: None}}}, system.namespace
    )

    def rolled() -> bool:
        machines = system.machines("workers")
        return (
            len(system.ready_nodes(NEW)) == REPLICAS
            and len(system.nodes.list()) == REPLICAS
            and system.pool_running("workers", REPLICAS)
            and len(machines) == REPLICAS
            and not set(old) & {m["metadata"]["name"] for m in machines}
        )

    await system.until(rolled, "every Machine replaced, every Node on the new version")
    assert story.first_marked == chosen, "the delete-machine annotated Machine goes first"
    assert story.fewest_ready >= REPLICAS, "Ready Machines fell below replicas"
    assert len(story.deleted) == REPLICAS, story.deleted
    assert story.undrained() == [], (
        f"instances that went without their Node cordoned: {story.undrained()}"
    )
    await system.until(
        lambda: (
            condition(system.machine_pool("workers"), c.ROLLING_OUT_CONDITION).get("status")
            == "False"
        ),
        "RollingOut False",
    )
    assert not any(
        c.REPLACE_MACHINE_ANNOTATION in (m["metadata"].get("annotations") or {})
        for m in system.machines("workers")
    )
