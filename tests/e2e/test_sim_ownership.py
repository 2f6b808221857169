"""Who owns what: a paused pool stands still; an external owner's size is reported back; a
pool Machine left without its infra machine and instance is released by the pool engine."""

from __future__ import annotations

from tests.e2e.conftest import System
from tests.support import eventually
from tests.support.builders import machine_pool, sim_machine_pool
from tests.support.conditions import condition_status
from tests.support.resources import MACHINE_POOLS, MACHINES, SIM_MACHINE_POOLS

from machinepool.api import constants as c
from machinepool.api.meta import ADOPTION_GRACE_SECONDS, parse_time
from machinepool.runtime import CORE_EVENTS, Obj


def _instances_alive(records: list[object]) -> int:
    return sum(1 for r in records if getattr(r, "forced_state", "") != "terminated")


async def _annotate(system: System, name: str, key: str, value: str | None) -> None:
    patch = {"metadata": {"annotations": {key: value}}}
    await system.client.patch(MACHINE_POOLS, name, patch, system.namespace)


async def test_paused_pool_stands_still_until_unpaused(system: System) -> None:
    await system.create_pool("frozen", 2)
    await system.until(lambda: system.pool_running("frozen", 2), "2 Ready nodes")
    await _annotate(system, "frozen", c.PAUSED_ANNOTATION, "true")
    await system.until(
        lambda: condition_status(system.machine_pool("frozen"), c.PAUSED_CONDITION) == "True",
        "Paused=True on the MachinePool",
    )
    await system.scale("frozen", 4)
    await system.until(
        lambda: (system.machine_pool("frozen") or {}).get("spec", {}).get("replicas") == 4,
        "the new size in the controllers' cache",
    )

    def members() -> tuple[int, int, int]:
        simmachines = [
            m
            for m in system.watched["simmachines"].list(system.namespace)
            if (m["metadata"].get("labels") or {}).get(c.POOL_NAME_LABEL) == "frozen"
        ]
        return len(system.machines("frozen")), len(simmachines), len(system.ready_nodes())

    await system.unchanged(members, "a paused pool's (Machines, SimMachines, Nodes)", window=5.0)
    assert len(await system.cloud.instances(system.namespace, "frozen")) == 2
    assert len(system.ready_nodes()) == 2

    await _annotate(system, "frozen", c.PAUSED_ANNOTATION, None)
    await system.until(lambda: system.pool_running("frozen", 4), "4 Ready nodes once unpaused")
    assert condition_status(system.machine_pool("frozen"), c.PAUSED_CONDITION) == "False"


async def test_external_owner_size_is_copied_back_and_never_changed(system: System) -> None:
    await system.create_pool("external", 3)
    await system.until(lambda: system.pool_running("external", 3), "3 Ready nodes")
    await _annotate(system, "external", c.REPLICAS_MANAGED_BY_ANNOTATION, "external-autoscaler")

    # The external owner shrinks the group out of band: the pool reports 2, replaces nothing.
    victim = system.machines("external")[0]["metadata"]["name"]
    await system.cloud.terminate_instance(system.namespace, victim)
    await system.until(
        lambda: (system.machine_pool("external") or {}).get("spec", {}).get("replicas") == 2,
        "spec.replicas copied back from the observed size",
    )
    await system.until(lambda: system.pool_running("external", 2), "2 Ready nodes, no replacement")
    alive = _instances_alive(await system.cloud.instances(system.namespace, "external"))
    assert alive == 2
    mp = system.machine_pool("external")
    assert mp is not None
    assert mp["status"]["phase"] in ("Running", "Scaling")


async def test_a_pool_machine_without_infra_machine_or_instance_is_released(
    system: System,
) -> None:
    """A pool Machine whose SimMachine and instance are both gone (deleted out of band, or
    applied from a stale cache after they went) is deleted by the pool engine, which owns
    the instances; the pool's other Machines are left alone."""
    await system.create_pool("strays", 2)
    await system.until(lambda: system.pool_running("strays", 2), "2 Ready nodes")
    mp = system.machine_pool("strays")
    assert mp is not None
    kept = sorted(m["metadata"]["name"] for m in system.machines("strays"))
    template = system.machines("strays")[0]
    stray = {
        "apiVersion": template["apiVersion"],
        "kind": "Machine",
        "metadata": {
            "name": "strays-gone-99",
            "labels": template["metadata"]["labels"],
            "ownerReferences": template["metadata"]["ownerReferences"],
        },
        "spec": {
            "clusterName": template["spec"]["clusterName"],
            "bootstrap": {"dataSecretName": ""},
            "infrastructureRef": {
                **template["spec"]["infrastructureRef"],
                "name": "strays-gone-99",
            },
            "providerID": "sim:///zone-a/strays-gone-99",
        },
    }
    await system.client.create(MACHINES, stray, system.namespace)

    async def released() -> Obj | None:
        events = await system.client.list(CORE_EVENTS, system.namespace)
        return next(
            (
                e
                for e in events.items
                if e.get("reason") == "SuccessfulDelete"
                and "Deleting Machine strays-gone-99" in str(e.get("message"))
            ),
            None,
        )

    event = await eventually(released, "the pool engine releasing the stray Machine")
    assert "SimMachine strays-gone-99 and its instance are gone" in event["message"]
    await system.until(
        lambda: all(m["metadata"]["name"] != "strays-gone-99" for m in system.machines()),
        "the stray Machine gone",
    )
    await system.until(lambda: system.pool_running("strays", 2), "still 2 Ready nodes")
    assert sorted(m["metadata"]["name"] for m in system.machines("strays")) == kept


async def test_a_pool_waits_quietly_for_the_machine_pool_that_will_adopt_it(
    system: System,
) -> None:
    """A SimMachinePool is usually applied a moment before its MachinePool. One a MachinePool
    names writes no status while it waits for the adoption (here it never comes: the
    MachinePool's Cluster does not exist); one nothing names says that it waits for an owner,
    but only after the adoption grace, so a pool applied in the usual order costs no status
    write that its adoption would replace."""
    pools = await system.watch_sim_pools()
    await system.client.create(
        SIM_MACHINE_POOLS, sim_machine_pool(system.namespace, "named"), system.namespace
    )
    await system.client.create(
        MACHINE_POOLS,
        machine_pool(system.namespace, "named", cluster="no-such-cluster"),
        system.namespace,
    )
    await system.client.create(
        SIM_MACHINE_POOLS, sim_machine_pool(system.namespace, "orphan"), system.namespace
    )

    def waiting_for_owner(name: str) -> dict[str, object] | None:
        for cond in ((pools.get(name, system.namespace) or {}).get("status") or {}).get(
            "conditions"
        ) or []:
            if cond["type"] == c.READY_CONDITION and cond["reason"] == "WaitingForOwner":
                return dict(cond)
        return None

    await system.until(lambda: waiting_for_owner("orphan") is not None, "orphan waits")
    orphan = pools.get("orphan", system.namespace)
    assert orphan is not None
    said = waiting_for_owner("orphan")
    assert said is not None
    waited = parse_time(str(said["lastTransitionTime"])) - parse_time(
        orphan["metadata"]["creationTimestamp"]
    )
    # Timestamps have whole seconds: a second less than the grace is still the grace.
    assert waited.total_seconds() >= ADOPTION_GRACE_SECONDS - 1, waited

    def named_status() -> object:
        return (pools.get("named", system.namespace) or {}).get("status")

    assert not named_status(), named_status()
    # Its grace ended no later than the orphan's: it stays quiet past it, too.
    await system.unchanged(named_status, "the named pool's status", window=3.0)
