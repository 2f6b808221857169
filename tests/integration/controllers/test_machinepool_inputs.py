"""Every watch of the MachinePool controller passes each change its reconcile reads.

The controller's watches drop updates that change nothing a reconcile reads (``inputs``:
``watches.pool_inputs``, ``machine_inputs``, ``referenced_inputs``, ``infra_machine_inputs``
and ``common.node_inputs``), and a pass skips what it found unchanged before (the Machines'
facts per version, the Machines in sync with their infra machines). Each filter is right only
while it names every field the reconcile reads: here a real reconcile of a Running pool, with
its pass-to-pass memory dropped so that it reads all it can, records what it reads of every
object it is woken by (``tests.support.reads``), and each filter must notice a change of each
of those fields. A field left out on purpose is named in ``EXEMPT`` with why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pprint import pformat

import pytest
from tests.support.conditions import condition
from tests.support.reads import Path, recording, unnoticed
from tests.support.resources import KUBEADM_CONFIGS, MACHINE_POOLS, MACHINES

from machinepool.api import constants as c
from machinepool.controllers.common import node_inputs
from machinepool.controllers.machine.controller import (
    cluster_inputs,
    machine_inputs,
    machine_node_inputs,
)
from machinepool.controllers.machine.controller import pool_inputs as machine_pool_inputs
from machinepool.controllers.machinepool import watches
from machinepool.runtime import NODES, Informer, Obj, ObjectKey

from .conftest import TEST_MACHINES, TEST_POOLS, Env, _now

WRITTEN_BY_THE_POOL = "written by the MachinePool controller alone, which reads its own writes"
EXEMPT: dict[str, dict[Path, str]] = {
    "machinepools": {
        ("status",): WRITTEN_BY_THE_POOL,
        ("spec", "providerIDList"): WRITTEN_BY_THE_POOL + " (copied from the infra pool)",
    },
}

MACHINE_WRITES = "written by the Machine controller alone, which reads its own writes"
MACHINE_EXEMPT: dict[str, dict[Path, str]] = {
    "machines": {
        **{
            ("status", "conditions", f"[{type_}]"): MACHINE_WRITES
            for type_ in (
                c.AVAILABLE_CONDITION,
                c.BOOTSTRAP_CONFIG_READY_CONDITION,
                c.DELETING_CONDITION,
                c.INFRASTRUCTURE_READY_CONDITION,
                c.NODE_HEALTHY_CONDITION,
                c.NODE_READY_CONDITION,
                c.PAUSED_CONDITION,
                c.READY_CONDITION,
                c.UP_TO_DATE_CONDITION,
                c.UPDATING_CONDITION,
            )
        },
        **{
            ("status", "deprecated", "v1beta1", "conditions", f"[{type_}]"): MACHINE_WRITES
            for type_ in (
                c.V1BETA1_INFRASTRUCTURE_READY_CONDITION,
                c.V1BETA1_NODE_HEALTHY_CONDITION,
                c.READY_CONDITION,
            )
        },
        ("status", "initialization"): MACHINE_WRITES,
        ("status", "nodeRef"): MACHINE_WRITES,
    },
}
"""Not a health check's marks (``machine.controller.HEALTH_CHECK_MARKS``): those another
controller writes, and the Machine's v1beta1 Ready sums them up."""


async def test_every_watch_passes_what_a_pool_reconcile_reads(env: Env) -> None:
    pid = "test:///inputs/0"
    await env.kubeadm_config("boot", ready=True)
    await env.infra_pool("infra")
    await env.infra_provider_ids("infra", [pid])
    await env.infra_status("infra", ready=True, replicas=1, infrastructureMachineKind="TestMachine")
    await env.infra_machine("m0", "inputs", pid, provisioned=True)
    await env.node("n0", pid)
    await env.machine_pool("inputs", replicas=1, infra="infra", bootstrap="boot")
    await env.pool_until(
        "inputs",
        lambda o: (
            o["status"].get("phase") == c.PHASE_RUNNING
            and o["status"].get("readyReplicas") == 1
            and condition(o, c.MACHINES_READY_CONDITION).get("status") == "True"
        ),
    )
    reconciler = env.reconciler
    assert reconciler is not None
    ns = env.namespace
    key = ObjectKey(ns, "inputs")
    cluster = ObjectKey(ns, env.cluster_name)
    cache = env.mgr.cache
    watched: list[tuple[Informer, ObjectKey, Callable[[Obj], object]]] = [
        (reconciler.pools, key, watches.pool_inputs),
        (reconciler.machines, ObjectKey(ns, "m0"), watches.machine_inputs),
        (await cache.get_informer(TEST_POOLS), ObjectKey(ns, "infra"), watches.referenced_inputs),
        (
            await cache.get_informer(KUBEADM_CONFIGS),
            ObjectKey(ns, "boot"),
            watches.referenced_inputs,
        ),
        (
            await cache.get_informer(TEST_MACHINES),
            ObjectKey(ns, "m0"),
            watches.infra_machine_inputs,
        ),
        (await env.cluster_cache.get_informer(cluster, NODES), ObjectKey("", "n0"), node_inputs),
    ]
    # What a pass remembers lets the next one skip reads; without it, a pass reads all.
    reconciler.memory.forget(key)
    with contextlib.ExitStack() as stack:
        reads = [stack.enter_context(recording(inf, k)) for inf, k, _ in watched]
        await reconciler.reconcile(key)
    missed: dict[str, set[Path]] = {}
    for (informer, k, inputs), read in zip(watched, reads, strict=True):
        obj: Obj | None = informer.get_key(k)
        assert obj is not None
        assert read, f"the reconcile read nothing of {informer.resource.plural} {k}"
        plural = informer.resource.plural
        if found := unnoticed(inputs, obj, read, exempt=EXEMPT.get(plural)):
            missed[f"{plural} {k}"] = found
    assert missed == {}, f"read by the reconcile, but no event would say so: {pformat(missed)}"


TAINTED_TEMPLATE: Obj = {
    "taints": [
        {"key": "example.com/gpu", "effect": "NoSchedule", "propagation": "Always"},
        {"key": "example.com/setup", "effect": "NoExecute", "propagation": "OnInitialization"},
    ]
}


@pytest.mark.parametrize("pool_node_taints", [True])
async def test_with_node_taints_the_node_watch_passes_what_a_pool_reconcile_reads(
    env: Env,
) -> None:
    """Gate MachinePoolNodeTaints on, a pool whose provider makes no Machines: the pool
    patches its Nodes itself, reading their labels, annotations and taints."""
    pid = "test:///inputs/2"
    await env.kubeadm_config("boot2", ready=True)
    await env.infra_pool("infra2")
    await env.infra_provider_ids("infra2", [pid])
    await env.infra_status("infra2", ready=True, replicas=1)
    await env.node("n2", pid)
    body = await env.machine_pool(
        "inputs2", replicas=1, infra="infra2", bootstrap="boot2", template=TAINTED_TEMPLATE
    )
    labels = {"node-role.kubernetes.io/gpu": ""}
    patch = {"spec": {"template": {"metadata": {"labels": labels}}}}
    await env.client.patch(MACHINE_POOLS, body["metadata"]["name"], patch, env.namespace)
    await env.nodes.until(
        "n2",
        lambda n: n is not None and "node-role.kubernetes.io/gpu" in n["metadata"]["labels"],
    )
    await env.pool_until(
        "inputs2",
        lambda o: (
            o["status"].get("phase") == c.PHASE_RUNNING
            and o["status"].get("readyReplicas") == 1
            and o["status"].get("observedGeneration") == o["metadata"]["generation"]
        ),
    )
    reconciler = env.reconciler
    assert reconciler is not None
    cluster = ObjectKey(env.namespace, env.cluster_name)
    informer = await env.cluster_cache.get_informer(cluster, NODES)
    with recording(informer, ObjectKey("", "n2")) as read:
        await reconciler.reconcile(ObjectKey(env.namespace, "inputs2"))
    obj = informer.get_key(ObjectKey("", "n2"))
    assert obj is not None
    assert read, "the reconcile read nothing of the Node"
    found = unnoticed(watches.pool_node_inputs, obj, read)
    assert found == set(), f"read by the reconcile, but no event would say so: {pformat(found)}"


@pytest.mark.parametrize("pool_node_taints", [False, True])
async def test_every_watch_passes_what_a_machine_reconcile_reads(
    env: Env, pool_node_taints: bool
) -> None:
    pid = "test:///inputs/1"
    await env.kubeadm_config("boot1", ready=True)
    await env.infra_pool("infra1")
    await env.infra_provider_ids("infra1", [pid])
    await env.infra_status(
        "infra1", ready=True, replicas=1, infrastructureMachineKind="TestMachine"
    )
    await env.infra_machine("m1", "inputs1", pid, provisioned=True)
    await env.node("n1", pid)
    await env.machine_pool(
        "inputs1",
        replicas=1,
        infra="infra1",
        bootstrap="boot1",
        template=TAINTED_TEMPLATE if pool_node_taints else None,
    )
    await env.machines.until(
        "m1", lambda m: m is not None and condition(m, c.READY_CONDITION).get("status") == "True"
    )
    reconciler = env.machine_reconciler
    assert reconciler is not None
    ns = env.namespace
    key = ObjectKey(ns, "m1")
    # A health check's mark, as the MachineHealthCheck controller writes it beside the
    # Machine controller's own conditions.
    machine = await env.client.get(MACHINES, "m1", ns)
    listed = machine["status"]["deprecated"]["v1beta1"]["conditions"]
    mark = {"type": "HealthCheckSucceeded", "status": "True", "lastTransitionTime": _now()}
    body = {
        "metadata": {"resourceVersion": machine["metadata"]["resourceVersion"]},
        "status": {"deprecated": {"v1beta1": {"conditions": [*listed, mark]}}},
    }
    await env.client.patch(MACHINES, "m1", body, ns, subresource="status")
    await env.machines.until(
        "m1",
        lambda m: (
            m is not None
            and condition(m, "HealthCheckSucceeded", v1beta1=True).get("status") == "True"
        ),
    )
    cluster = ObjectKey(ns, env.cluster_name)
    watched: list[tuple[Informer, ObjectKey, Callable[[Obj], object]]] = [
        (reconciler.machines, key, machine_inputs),
        (reconciler.clusters, cluster, cluster_inputs),
        (
            await env.cluster_cache.get_informer(cluster, NODES),
            ObjectKey("", "n1"),
            machine_node_inputs,
        ),
    ]
    if reconciler.pools is not None:
        # Gate on: the owning pool's template taints, read for the Node.
        watched.append((reconciler.pools, ObjectKey(ns, "inputs1"), machine_pool_inputs))
    with contextlib.ExitStack() as stack:
        reads = [stack.enter_context(recording(inf, k)) for inf, k, _ in watched]
        await reconciler.reconcile(key)
    missed: dict[str, set[Path]] = {}
    for (informer, k, inputs), read in zip(watched, reads, strict=True):
        obj = informer.get_key(k)
        assert obj is not None
        plural = informer.resource.plural
        if found := unnoticed(inputs, obj, read, exempt=MACHINE_EXEMPT.get(plural)):
            missed[f"{plural} {k}"] = found
    assert missed == {}, f"read by the reconcile, but no event would say so: {pformat(missed)}"
