"""Who owns the size: a paused pool stands still; an external owner's size is reported back."""

from __future__ import annotations

from tests.e2e.conftest import System
from tests.support.resources import MACHINE_POOLS

from machinepool.api import constants as c


def _instances_alive(records: list[object]) -> int:
    return sum(1 for r in records if getattr(r, "forced_state", "") != "terminated")


async def _annotate(system: System, name: str, key: str, value: str | None) -> None:
    patch = {"metadata": {"annotations": {key: value}}}
    await system.client.patch(MACHINE_POOLS, name, patch, system.namespace)


def _condition(obj: dict[str, object] | None, type_: str) -> str | None:
    status = (obj or {}).get("status") or {}
    assert isinstance(status, dict)
    for cond in status.get("conditions") or []:
        if cond.get("type") == type_:
            return str(cond.get("status"))
    return None


async def test_paused_pool_stands_still_until_unpaused(system: System) -> None:
    await system.create_pool("frozen", 2)
    await system.until(lambda: system.pool_running("frozen", 2), "2 Ready nodes")
    await _annotate(system, "frozen", c.PAUSED_ANNOTATION, "true")
    await system.until(
        lambda: _condition(system.machine_pool("frozen"), c.PAUSED_CONDITION) == "True",
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
    assert _condition(system.machine_pool("frozen"), c.PAUSED_CONDITION) == "False"


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
