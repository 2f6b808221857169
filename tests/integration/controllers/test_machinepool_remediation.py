"""Remediation of MachinePool Machines against the real control plane: the in-flight bound
(``max-in-flight-remediations``) counted over informer events, a MachineHealthCheck with an
external remediation template reported as unsupported, and a mark that loses an optimistic
lock retried rather than dropped."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pytest
from tests.support import Changes, eventually, watch_until
from tests.support.conditions import condition
from tests.support.resources import MACHINE_HEALTH_CHECKS, MACHINES

from machinepool.api import constants as c
from machinepool.api.conditions import set_condition
from machinepool.api.contract import InfraMachinePool
from machinepool.api.meta import dig, ensure
from machinepool.api.views import ClusterView, MachinePoolView, MachineView
from machinepool.controllers import machinehealthcheck
from machinepool.controllers.machinehealthcheck.controller import EVENT_TEMPLATE_NOT_SUPPORTED
from machinepool.controllers.machinepool import MachinePoolReconciler
from machinepool.controllers.machinepool.remediation import reconcile_remediation
from machinepool.controllers.machinepool.scope import Env as PoolEnv
from machinepool.controllers.machinepool.scope import PoolMemory, Scope
from machinepool.runtime import (
    CORE_EVENTS,
    Client,
    ClusterCache,
    Conflict,
    FuncHandler,
    Informer,
    Manager,
    NotFound,
    Obj,
)
from machinepool.runtime.kube.patch import Patcher

from .conftest import Env

HOLD = "test.machinepool.dev/hold"
"""A finalizer of the test's: keeps a remediated Machine in flight until the test lets go."""


async def _pool_with_machines(env: Env, names: list[str], **annotations: str) -> None:
    """A MachinePool ``pool`` whose provider opted into MachinePool Machines, one per name,
    each with a Ready Node; returns once every Machine exists and carries ``HOLD``."""
    ids = [f"test:///rem/{name}" for name in names]
    await env.kubeadm_config("boot", ready=True)
    await env.infra_pool("infra")
    await env.infra_provider_ids("infra", ids)
    await env.infra_status(
        "infra", ready=True, replicas=len(ids), infrastructureMachineKind="TestMachine"
    )
    for name, pid in zip(names, ids, strict=True):
        await env.infra_machine(name, "pool", pid, provisioned=True)
        await env.node(name, pid)
    await env.machine_pool(
        "pool", replicas=len(ids), infra="infra", bootstrap="boot", annotations=annotations
    )
    for name in names:
        await env.machines.until(name, lambda m: m is not None)
        # Merged with the Machine finalizer core created it with (apply keeps others' entries).
        patch = {"metadata": {"finalizers": [c.MACHINE_FINALIZER, HOLD]}}
        await env.client.patch(MACHINES, name, patch, env.namespace)


async def _write(client: Client, namespace: str, name: str, change: object) -> None:
    """Read Machine ``name``, apply ``change`` to a copy, patch; again if it lost the race."""

    async def attempt() -> bool:
        machine = await client.get(MACHINES, name, namespace)
        updated = copy.deepcopy(machine)
        change(updated)  # type: ignore[operator]
        try:
            await Patcher(client, MACHINES, machine).patch(updated)
        except Conflict:
            return False
        return True

    await eventually(attempt, f"a write to Machine {name}")


def _mark(machine: Obj) -> None:
    """What a MachineHealthCheck writes on an unhealthy Machine it may remediate."""
    conditions = ensure(machine, "status").setdefault("conditions", [])
    generation = dig(machine, "metadata", "generation")
    set_condition(
        conditions,
        c.HEALTH_CHECK_SUCCEEDED_CONDITION,
        False,
        c.HAS_REMEDIATE_ANNOTATION_REASON,
        "marked by the test",
        generation,
    )
    set_condition(
        conditions,
        c.OWNER_REMEDIATED_CONDITION,
        False,
        c.WAITING_FOR_REMEDIATION_REASON,
        "Waiting for remediation",
        generation,
    )


def _release(machine: Obj) -> None:
    machine["metadata"]["finalizers"] = [
        f for f in machine["metadata"].get("finalizers") or [] if f != HOLD
    ]


@dataclass
class InFlight(Changes):
    """Counts, on every Machine event, how many Machines are being deleted at that moment."""

    informer: Informer
    namespace: str
    most: int = 0
    """The most Machines seen deleting at once."""
    started: list[str] = field(default_factory=list)
    """Machines in the order their deletion was first seen."""
    deferred: set[str] = field(default_factory=set)
    """Machines seen waiting their turn (``RemediationDeferred``)."""

    def __post_init__(self) -> None:
        self.informer.add_handler(
            FuncHandler(self._seen, lambda _old, new: self._seen(new), self._seen)
        )

    def _seen(self, _obj: Obj) -> None:
        machines = self.informer.list(self.namespace)
        deleting = [m for m in machines if m["metadata"].get("deletionTimestamp")]
        self.most = max(self.most, len(deleting))
        for machine in deleting:
            if machine["metadata"]["name"] not in self.started:
                self.started.append(machine["metadata"]["name"])
        for machine in machines:
            owner = condition(machine, c.OWNER_REMEDIATED_CONDITION)
            if owner.get("reason") == c.REMEDIATION_DEFERRED_REASON:
                self.deferred.add(machine["metadata"]["name"])
        self.changed()

    def deleting(self) -> set[str]:
        return {
            m["metadata"]["name"]
            for m in self.informer.list(self.namespace)
            if m["metadata"].get("deletionTimestamp")
        }


async def test_marked_machines_beyond_the_bound_wait_their_turn(env: Env) -> None:
    names = ["r0", "r1", "r2"]
    flight = InFlight(informer=env.machines.informer, namespace=env.namespace)
    await _pool_with_machines(env, names, **{c.MAX_IN_FLIGHT_REMEDIATIONS_ANNOTATION: "2"})
    for name in names:
        await _write(env.client, env.namespace, name, _mark)

    # Three marked, two may go: the third waits, saying so, while the two are held in flight.
    def two_in_flight_one_deferred() -> bool:
        assert flight.most <= 2, f"{flight.most} Machines were in flight at once, the bound is 2"
        return len(flight.deleting()) == 2 and len(flight.deferred - flight.deleting()) == 1

    await flight.until(two_in_flight_one_deferred, "two Machines in flight and the third deferred")
    (waiting,) = set(names) - flight.deleting()
    mp = await env.pool_until(
        "pool", lambda o: condition(o, c.REMEDIATING_CONDITION).get("status") == "True"
    )
    assert "at most 2 at a time" in condition(mp, c.REMEDIATING_CONDITION)["message"]

    # One remediation ends: the waiting Machine takes its place.
    await _write(env.client, env.namespace, flight.started[0], _release)
    await flight.until(lambda: waiting in flight.deleting(), f"{waiting} deleted in its turn")
    for name in flight.started[1:]:
        await _write(env.client, env.namespace, name, _release)
    await flight.until(
        lambda: not env.machines.informer.list(env.namespace), "every marked Machine gone"
    )
    assert flight.most == 2, f"{flight.most} Machines were in flight at once, the bound is 2"
    assert flight.started[-1] == waiting


async def test_health_check_with_a_remediation_template_is_reported_unsupported(
    env: Env,
) -> None:
    await machinehealthcheck.setup(env.mgr, env.cluster_cache)
    await _pool_with_machines(env, ["x0"])
    template = {
        "apiVersion": "infrastructure.test.machinepool.dev/v1alpha1",
        "kind": "TestRemediationTemplate",
        "name": "rebuild",
    }
    await env.client.create(
        MACHINE_HEALTH_CHECKS,
        {
            "apiVersion": MACHINE_HEALTH_CHECKS.api_version,
            "kind": "MachineHealthCheck",
            "metadata": {"name": "external"},
            "spec": {
                "clusterName": env.cluster_name,
                "selector": {"matchLabels": {c.POOL_NAME_LABEL: "pool"}},
                "remediation": {"templateRef": template},
            },
        },
        env.namespace,
    )
    # The user's way to have a Machine remediated at once.
    patch = {"metadata": {"annotations": {c.REMEDIATE_MACHINE_ANNOTATION: ""}}}
    await env.client.patch(MACHINES, "x0", patch, env.namespace)

    machine = await env.machines.until(
        "x0",
        lambda m: m is not None and bool(condition(m, c.EXTERNALLY_REMEDIATED_CONDITION)),
    )
    assert machine is not None
    external = condition(machine, c.EXTERNALLY_REMEDIATED_CONDITION)
    assert (external["status"], external["reason"]) == (
        "False",
        c.REMEDIATION_TEMPLATE_NOT_SUPPORTED_REASON,
    )
    assert "remove templateRef" in external["message"]
    assert condition(machine, c.HEALTH_CHECK_SUCCEEDED_CONDITION)["status"] == "False"
    # Only marked: not for the pool to remediate.
    assert not condition(machine, c.OWNER_REMEDIATED_CONDITION)
    events = await watch_until(
        env.client,
        CORE_EVENTS,
        env.namespace,
        lambda evs: any(e.get("reason") == EVENT_TEMPLATE_NOT_SUPPORTED for e in evs.values()),
        "ExternalRemediationNotSupported on the MachineHealthCheck",
    )
    (event,) = [e for e in events.values() if e.get("reason") == EVENT_TEMPLATE_NOT_SUPPORTED]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "MachineHealthCheck"
    assert event["involvedObject"]["name"] == "external"
    assert "TestRemediationTemplate rebuild" in event["message"]
    assert "is not supported" in event["message"]
    kept = await env.client.get(MACHINES, "x0", env.namespace)
    assert not kept["metadata"].get("deletionTimestamp")


async def test_a_mark_that_loses_an_optimistic_lock_is_retried(
    client: Client, namespace: str, crds: list[str]
) -> None:
    # No controller runs here: the phase is called with a copy of the Machine that a write
    # the pool was not woken for (say, the Machine controller's) has made stale.
    body = {
        "apiVersion": MACHINES.api_version,
        "kind": "Machine",
        "metadata": {"name": "m0", "labels": {c.POOL_NAME_LABEL: "pool"}},
        "spec": {
            "clusterName": "c",
            "bootstrap": {"dataSecretName": ""},
            "infrastructureRef": {"apiGroup": "x.dev", "kind": "TestMachine", "name": "m0"},
        },
    }
    await client.create(MACHINES, body, namespace)
    await _write(client, namespace, "m0", _mark)
    stale = await client.get(MACHINES, "m0", namespace)

    def node_ready(machine: Obj) -> None:
        conditions = ensure(machine, "status").setdefault("conditions", [])
        set_condition(conditions, c.NODE_READY_CONDITION, False, "NodeNotReady", "", 1)

    await _write(client, namespace, "m0", node_ready)

    mgr = Manager(client, bind_address=None)
    cache = ClusterCache(client)
    reconciler = MachinePoolReconciler(mgr, cache)
    env = PoolEnv(
        client=client,
        cluster_cache=cache,
        resolver=reconciler.resolver,
        recorder=reconciler.recorder,
        machines=Informer(client, MACHINES),  # not read: the phase is handed its Machines
        watches=reconciler,
        machines_up_to_date=False,
        pool_node_taints=False,
    )
    mp = {"metadata": {"name": "pool", "namespace": namespace, "uid": "u"}, "spec": {}}
    scope = Scope(
        env,
        PoolMemory(),
        MachinePoolView(mp),
        ClusterView({}),
        infra_pool=InfraMachinePool({"status": {"infrastructureMachineKind": "X"}}),
    )
    try:
        scope.machines = [MachineView(stale)]
        # Raised, so the runtime retries with backoff; dropped, nothing would retry it.
        with pytest.raises(Conflict):
            await reconcile_remediation(scope)
        machine = await client.get(MACHINES, "m0", namespace)
        assert not machine["metadata"].get("deletionTimestamp")

        # The retry reads the newer copy, and remediates.
        scope.machines = [MachineView(machine)]
        await reconcile_remediation(scope)
        with pytest.raises(NotFound):
            await client.get(MACHINES, "m0", namespace)
    finally:
        await reconciler.recorder.close()
        await cache.stop()
