"""Our core against upstream's core manager, scenario by scenario (see ``differential``).

``test_machinepool_matches_upstream`` runs every scenario of ``SCENARIOS`` at once (each in its
own pair of namespaces) and fails on any difference that docs/upstream-differences.md does not
list; ``test_every_listed_difference_still_occurs`` keeps that page honest the other way.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from tests.conformance.differential import (
    WATCH_FILTER,
    Check,
    Scenario,
    Side,
    Step,
    allowed_differences,
    compare,
    let_upstream_write,
    normalise,
    running,
    status,
    until,
    upstream_access,
)
from tests.reliability.harness import ControllerProcess
from tests.support import eventually
from tests.support.builders import (
    CLUSTER,
    create_pool,
    healthy_node_conditions,
    kubeadm_config,
    machine_pool,
    pool_objects,
    sim_machine_pool,
)
from tests.support.conditions import condition, is_true
from tests.support.pools import scale_pool
from tests.support.resources import (
    CLUSTERS,
    KUBEADM_CONFIGS,
    MACHINE_POOLS,
    MACHINES,
    SIM_MACHINE_POOLS,
)
from tests.support.topology import (
    CLASS,
    CLUSTER_CLASSES,
    MEDIUM,
    control_plane_at,
    create_class_and_cluster,
    machine_pools_class,
    patch_topology,
    provision_infra_cluster,
)
from tests.support.upstream import (
    TEST_CLUSTERS,
    TEST_MACHINE_POOLS,
    TEST_MACHINES,
    UpstreamProcess,
    cluster_namespace,
    upstream_management,
)

from machinepool.api.constants import (
    AUTOSCALER_MAX_SIZE_ANNOTATION,
    AUTOSCALER_MIN_SIZE_ANNOTATION,
    CLUSTER_NAME_LABEL,
    CONTROL_PLANE_LABEL,
    PAUSED_ANNOTATION,
    POOL_NAME_LABEL,
    REPLICAS_MANAGED_BY_ANNOTATION,
)
from machinepool.api.kinds import MACHINE_DRAIN_RULES
from machinepool.controlplane import WorkloadCluster
from machinepool.controlplane.process import free_port
from machinepool.runtime import (
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    SECRETS,
    AlreadyExists,
    Client,
    PatchType,
)
from machinepool.simworld import SimCloud
from machinepool.webhooks.machinepool import default_machine_pool

pytestmark = pytest.mark.timeout(1200)

BOOTSTRAP_ROWS = "bootstrap: "
"""Rows of test_bootstrap_differential, which checks them itself."""

STEP_TIMEOUT = 240.0
"""Upstream's MachinePool controller notices a Node's readiness on its 30 s requeue."""


async def _create(side: Side, pool: str, replicas: int | None, **overrides: Any) -> None:
    """The pool's objects (``builders.create_pool``), labelled for ``side``'s manager."""
    await create_pool(
        side.client, side.namespace, pool, replicas=replicas, labels=side.labels, **overrides
    )


async def _scale(replicas: int, side: Side, pool: str) -> None:
    await scale_pool(side.client, side.namespace, pool, replicas)


def scale(replicas: int) -> Step:
    return Step(
        f"scale to {replicas}",
        lambda side, pool: _scale(replicas, side, pool),
        running(replicas),
    )


def create(replicas: int) -> Step:
    return Step(
        f"create with {replicas}",
        lambda side, pool: _create(side, pool, replicas),
        running(replicas),
    )


async def _pause_cluster(paused: bool, side: Side, _pool: str) -> None:
    patch = {"spec": {"paused": paused}}
    await side.client.patch(CLUSTERS, CLUSTER, patch, side.namespace)


async def _unpause_pool(side: Side, pool: str) -> None:
    patch = {"metadata": {"annotations": {PAUSED_ANNOTATION: None}}}
    await side.client.patch(MACHINE_POOLS, pool, patch, side.namespace)


async def _create_infra(side: Side, pool: str) -> None:
    infra = sim_machine_pool(side.namespace, pool, labels=side.labels)
    await side.client.create(SIM_MACHINE_POOLS, infra, side.namespace)


async def _create_config(side: Side, pool: str) -> None:
    config = kubeadm_config(side.namespace, pool, labels=side.labels)
    await side.client.create(KUBEADM_CONFIGS, config, side.namespace)


async def _delete(side: Side, pool: str) -> None:
    await side.client.delete(MACHINE_POOLS, pool, side.namespace)


async def _managed_by(side: Side, pool: str) -> None:
    patch = {"metadata": {"annotations": {REPLICAS_MANAGED_BY_ANNOTATION: "autoscaler"}}}
    await side.client.patch(MACHINE_POOLS, pool, patch, side.namespace)


def _annotated(objs: dict[str, Any], key: str) -> bool:
    mp = objs["MachinePool"] or {}
    return key in (mp["metadata"].get("annotations") or {})


def _paused(objs: dict[str, Any]) -> bool:
    return is_true(objs["MachinePool"], "Paused")


async def _pause_config(paused: bool, side: Side, pool: str) -> None:
    value = "true" if paused else None
    patch = {"metadata": {"annotations": {PAUSED_ANNOTATION: value}}}
    await side.client.patch(KUBEADM_CONFIGS, pool, patch, side.namespace)


async def _config_status(side: Side, pool: str, status: dict[str, Any]) -> None:
    """Write the KubeadmConfig's status as its bootstrap provider would (the config is paused,
    so our bootstrap controller, which serves both sides, leaves it as written)."""
    await side.client.patch(
        KUBEADM_CONFIGS, pool, {"status": status}, side.namespace, subresource="status"
    )


async def _create_without_secret_name(side: Side, pool: str) -> None:
    """The pool, its bootstrap config reporting its data secret created but naming none."""
    (_, config), (_, infra), (_, mp) = pool_objects(
        side.namespace, pool, replicas=1, labels=side.labels
    )
    config["metadata"]["annotations"] = {PAUSED_ANNOTATION: "true"}
    await side.client.create(KUBEADM_CONFIGS, config, side.namespace)
    await _config_status(side, pool, {"initialization": {"dataSecretCreated": True}})
    await side.client.create(SIM_MACHINE_POOLS, infra, side.namespace)
    await side.client.create(MACHINE_POOLS, mp, side.namespace)


RENAMED = "-renamed"


async def _rename_data_secret(side: Side, pool: str) -> None:
    """The bootstrap config switches to another data Secret (same bytes, new name)."""
    secret = await side.client.get(SECRETS, pool, side.namespace)
    copy = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": secret.get("type"),
        "metadata": {
            "name": pool + RENAMED,
            "namespace": side.namespace,
            "labels": dict(secret["metadata"].get("labels") or {}),
        },
        "data": dict(secret.get("data") or {}),
    }
    await side.client.create(SECRETS, copy, side.namespace)
    await _pause_config(True, side, pool)
    await _config_status(side, pool, {"dataSecretName": pool + RENAMED})


def _data_secret_name(objs: dict[str, Any]) -> str | None:
    mp = objs["MachinePool"] or {}
    bootstrap = mp["spec"]["template"]["spec"]["bootstrap"] if mp else {}
    return bootstrap.get("dataSecretName")  # type: ignore[no-any-return]


async def _delete_infra(side: Side, pool: str) -> None:
    await side.client.delete(SIM_MACHINE_POOLS, pool, side.namespace)


def _failure_reason(objs: dict[str, Any]) -> bool:
    return bool(((status(objs).get("deprecated") or {}).get("v1beta1") or {}).get("failureReason"))


def _provider_ids(objs: dict[str, Any]) -> list[str]:
    mp = objs["MachinePool"] or {}
    return list((mp.get("spec") or {}).get("providerIDList") or [])


LATE_BOOT = 60
"""Seconds a nodes-late instance boots for: ample time to stop its kubelet before it joins."""


async def _kubelet(side: Side, instance: str, value: str | None) -> None:
    await SimCloud(side.client).stop_kubelet(side.namespace, instance, stopped=value == "stopped")


async def _create_without_nodes(side: Side, pool: str) -> None:
    """The pool, its instances listed by the infra pool but their kubelets stopped while they
    boot, so their Nodes do not register."""
    sim_spec = {"template": {"instanceType": "sim.small"}, "sim": {"bootDelaySeconds": LATE_BOOT}}
    await _create(side, pool, 2, sim_spec=sim_spec)
    cloud = SimCloud(side.client)
    stopped: set[str] = set()

    async def all_stopped() -> bool:
        # Each instance as soon as it is listed: its own boot is what the stop must beat, and
        # on a loaded machine the second create can come long after the first.
        for instance in await cloud.instances(side.namespace, pool):
            if instance.id not in stopped:
                await _kubelet(side, instance.id, "stopped")
                stopped.add(instance.id)
        return len(stopped) == 2

    await eventually(all_stopped, within=2 * LATE_BOOT, interval=0.2)


async def _start_kubelets(side: Side, pool: str) -> None:
    for instance in await SimCloud(side.client).instances(side.namespace, pool):
        await _kubelet(side, instance.id, None)


async def _create_test_pool(side: Side, pool: str, *, machines: bool = False) -> None:
    """A pool of one instance whose infra provider is the test: a ``TestMachinePool`` (no
    controller runs for it) whose spec and status the test writes as a provider would, and
    the Node of its instance, Ready. ``machines``: the provider opts into MachinePool Machines
    (``status.infrastructureMachineKind``) and lists the instance as a provisioned
    ``TestMachine``; else it makes none."""
    (_, config), _, (_, mp) = pool_objects(side.namespace, pool, replicas=1, labels=side.labels)
    mp["spec"]["template"]["spec"]["infrastructureRef"]["kind"] = TEST_MACHINE_POOLS.kind
    provider_id = f"test:///{pool}-0"
    infra = {
        "apiVersion": TEST_MACHINE_POOLS.api_version,
        "kind": TEST_MACHINE_POOLS.kind,
        "metadata": {
            "name": pool,
            "namespace": side.namespace,
            "labels": side.labels,
        },
        "spec": {"providerIDList": [provider_id]},
    }
    await side.client.create(TEST_MACHINE_POOLS, infra, side.namespace)
    ready: dict[str, Any] = {"ready": True, "initialization": {"provisioned": True}, "replicas": 1}
    if machines:
        ready["infrastructureMachineKind"] = TEST_MACHINES.kind
        await _test_machine(side, pool, provider_id)
    await side.client.patch(
        TEST_MACHINE_POOLS, pool, {"status": ready}, side.namespace, subresource="status"
    )
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"{pool}-0"}}
    node["spec"] = {"providerID": provider_id}
    await side.workload.create(NODES, node)
    conditions = {"status": {"conditions": healthy_node_conditions()}}
    await side.workload.patch(NODES, f"{pool}-0", conditions, subresource="status")
    await side.client.create(KUBEADM_CONFIGS, config, side.namespace)
    await side.client.create(MACHINE_POOLS, mp, side.namespace)


async def _test_machine(side: Side, pool: str, provider_id: str) -> None:
    """The pool's one ``TestMachine``, labelled as a provider labels its infra machines (the
    Cluster's and the pool's names), provisioned."""
    body = {
        "apiVersion": TEST_MACHINES.api_version,
        "kind": TEST_MACHINES.kind,
        "metadata": {
            "name": f"{pool}-0",
            "labels": {**side.labels, CLUSTER_NAME_LABEL: CLUSTER, POOL_NAME_LABEL: pool},
        },
        "spec": {"providerID": provider_id},
    }
    await side.client.create(TEST_MACHINES, body, side.namespace)
    provisioned = {"status": {"initialization": {"provisioned": True}}}
    await side.client.patch(
        TEST_MACHINES, f"{pool}-0", provisioned, side.namespace, subresource="status"
    )


async def _fail_test_machine(side: Side, pool: str) -> None:
    """The provider reports a terminal failure of the instance, as a v1beta1-contract
    provider does: ``status.failureReason`` and ``failureMessage`` on the infra machine."""
    failure = {"failureReason": "UpdateError", "failureMessage": "the instance was retired"}
    await side.client.patch(
        TEST_MACHINES, f"{pool}-0", {"status": failure}, side.namespace, subresource="status"
    )


def _machine_failed(objs: dict[str, Any]) -> bool:
    (machine,) = objs["Machines"] or [{}]
    v1beta1 = ((machine.get("status") or {}).get("deprecated") or {}).get("v1beta1") or {}
    return bool(v1beta1.get("failureReason") and v1beta1.get("failureMessage"))


def _running_without_machines(objs: dict[str, Any]) -> bool:
    s = status(objs)
    return (
        s.get("phase") == "Running" and len(s.get("nodeRefs") or []) == 1 and not objs["Machines"]
    )


AUTOSCALER_SIZES = {AUTOSCALER_MIN_SIZE_ANNOTATION: "2", AUTOSCALER_MAX_SIZE_ANNOTATION: "4"}

TOPOLOGY_VERSION, TOPOLOGY_NEXT = "v1.33.4", "v1.34.4"
SKIP_VERSION_CHECK = "unsafe.topology.cluster.x-k8s.io/disable-update-version-check"
TOPOLOGY_CLUSTER_FILTER = {"upstream": "upstream", "ours": "ours-topology"}
"""The watch-filter value of each side's Cluster and ClusterClass: on ours, that of the
topology manager (``sides``), not of our core, whose Machines upstream's must not serve."""


async def _create_topology(side: Side, pool: str) -> None:
    """A Cluster of a ClusterClass with a pool of 2 (its MachinePool named ``pool``, as the
    pool's class says) at TOPOLOGY_VERSION; the test writes its infra cluster's and control
    plane's status."""
    assert side.cluster is not None
    await create_class_and_cluster(
        side.client,
        side.namespace,
        side.cluster,
        version=TOPOLOGY_VERSION,
        replicas=2,
        cluster_labels={WATCH_FILTER: TOPOLOGY_CLUSTER_FILTER[side.name]},
        pool_labels={WATCH_FILTER: side.name},
        # The MachinePool named as the scenario; the names upstream makes for its config and
        # infra pool (``work-pool-<random>``) cannot then contain the sides' namespaces.
        naming=pool,
    )
    await provision_infra_cluster(side.client, side.namespace)
    await control_plane_at(side.client, side.namespace, TOPOLOGY_VERSION)


async def _bump_topology_version(side: Side, pool: str) -> None:
    """The topology's version to TOPOLOGY_NEXT: the topology asks the control plane first
    (the test reports it upgraded, as its provider would), then the pool, which rolls.

    Upstream's Cluster webhook (the one the management cluster calls, upstream's manager's)
    checks that no MachinePool is upgrading through that manager's connections to workload
    clusters, which its watch filter limits to upstream's side; on both sides the Cluster
    carries upstream's annotation that skips the check, so both are bumped alike."""
    skip = {"metadata": {"annotations": {SKIP_VERSION_CHECK: ""}}}
    await side.client.patch(CLUSTERS, CLUSTER, skip, side.namespace, patch_type=PatchType.MERGE)
    await patch_topology(side.client, side.namespace, {"version": TOPOLOGY_NEXT})
    await control_plane_at(side.client, side.namespace, TOPOLOGY_NEXT)


async def _rotate_topology_template(side: Side, pool: str) -> None:
    """The ClusterClass names another SimMachinePoolTemplate (``sim.medium``): the topology
    updates the pool's SimMachinePool in place and the pool replaces its instances."""
    workers = {"machinePools": machine_pools_class(MEDIUM, naming=pool)}
    patch = {"spec": {"workers": workers}}
    await side.client.patch(
        CLUSTER_CLASSES, CLASS, patch, side.namespace, patch_type=PatchType.MERGE
    )


def _instance_types(objs: dict[str, Any]) -> set[str]:
    return {
        ((n.get("metadata") or {}).get("labels") or {}).get("node.kubernetes.io/instance-type", "")
        for n in objs["Nodes"]
    }


def _running_at(version: str) -> Check:
    """``running(2)``, the MachinePool's version and every Node's kubelet at ``version``."""

    def check(objs: dict[str, Any]) -> bool:
        mp = objs["MachinePool"] or {}
        kubelets = {
            ((n.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion")
            for n in objs["Nodes"]
        }
        return (
            running(2)(objs)
            and mp["spec"]["template"]["spec"].get("version") == version
            and kubelets == {version}
        )

    return check


CONTROL_PLANE_MACHINE = "control-plane-0"


async def _control_plane_machine(side: Side) -> None:
    """A control-plane Machine of the Cluster, which no controller reconciles (it carries no
    watch-filter label): upstream's Machine controller drains and deletes a deleted Machine's
    Node only while the Cluster has a control-plane Machine (or an externally managed control
    plane), and the scenarios' Clusters have neither otherwise."""
    body = {
        "apiVersion": MACHINES.api_version,
        "kind": "Machine",
        "metadata": {"name": CONTROL_PLANE_MACHINE, "labels": {CONTROL_PLANE_LABEL: ""}},
        "spec": {
            "clusterName": CLUSTER,
            "bootstrap": {"dataSecretName": CONTROL_PLANE_MACHINE},
            "infrastructureRef": {
                "apiGroup": TEST_CLUSTERS.group,
                "kind": "TestMachine",
                "name": CONTROL_PLANE_MACHINE,
            },
        },
    }
    await side.client.create(MACHINES, body, side.namespace)


def _drain_rule(name: str, behavior: str, app: str, order: int | None = None) -> dict[str, Any]:
    drain: dict[str, Any] = {"behavior": behavior}
    if order is not None:
        drain["order"] = order
    return {
        "apiVersion": MACHINE_DRAIN_RULES.api_version,
        "kind": "MachineDrainRule",
        "metadata": {"name": name},
        "spec": {"drain": drain, "pods": [{"selector": {"matchLabels": {"app": app}}}]},
    }


DRAIN_RULES = [
    _drain_rule("agents", "Skip", "agent"),
    _drain_rule("batch", "WaitCompleted", "batch"),
    _drain_rule("db-last", "Drain", "db", 10),
]
DRAINED_PODS = ("agent", "batch", "db", "web")
"""One pod per rule, and ``web``, which no rule names (Drain, order 0)."""


async def _create_with_drain_rules(side: Side, pool: str) -> None:
    await _control_plane_machine(side)
    for rule in DRAIN_RULES:
        await side.client.create(MACHINE_DRAIN_RULES, rule, side.namespace)
    await _create(side, pool, 1)


async def _pods(side: Side, pool: str) -> dict[str, dict[str, Any]]:
    """The scenario's pods on the workload cluster, by name."""
    found = await side.workload.list(PODS, "default")
    return {p["metadata"]["name"]: p for p in found.items if p["metadata"]["name"] in DRAINED_PODS}


async def _run_pods(side: Side, pool: str) -> None:
    """The drained pods, bound to the pool's Node; the node simulator runs them."""
    (node,) = await side.pool_nodes(pool)
    for name in DRAINED_PODS:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {
                "nodeName": node["metadata"]["name"],
                "automountServiceAccountToken": False,
                "containers": [{"name": "c", "image": "example.invalid/app:1"}],
            },
        }
        await eventually(  # the default ServiceAccount appears shortly after the cluster starts
            lambda body=body: _created(side, body), f"{side.name}: pod {name} created"
        )

    async def all_running() -> bool:
        pods = await _pods(side, pool)
        return len(pods) == len(DRAINED_PODS) and all(
            (p.get("status") or {}).get("phase") == "Running" for p in pods.values()
        )

    await eventually(all_running, f"{side.name}: the drained pods running")


async def _created(side: Side, body: dict[str, Any]) -> bool:
    try:
        await side.workload.create(PODS, body, "default")
    except AlreadyExists:
        return True
    except Exception:  # no ServiceAccount yet: refused, retried
        return False
    return True


async def _scale_down_to_drain(side: Side, pool: str) -> None:
    """Scale to 0; the Machine's drain evicts ``web`` (order 0) and no other: ``agent`` is
    skipped, ``batch`` waited for, ``db`` held behind ``batch`` (order 10)."""
    await _scale(0, side, pool)

    async def web_gone() -> bool:
        return "web" not in await _pods(side, pool)

    await eventually(web_gone, f"{side.name}: web evicted", within=STEP_TIMEOUT)
    pods = await _pods(side, pool)
    for name in ("agent", "batch", "db"):
        assert name in pods, f"{side.name}: {name} left in the drain's first rounds"
        evicted = pods[name]["metadata"].get("deletionTimestamp")
        assert not evicted, f"{side.name}: {name} was evicted in the drain's first rounds"


async def _complete_batch(side: Side, pool: str) -> None:
    """The WaitCompleted pod's workload ends it: ``db`` is evicted next, ``agent`` never."""
    pods = await _pods(side, pool)
    assert {"agent", "db"} <= set(pods), f"{side.name}: {sorted(pods)} left before batch ends"
    await side.workload.delete(PODS, "batch", "default", grace_period_seconds=0)


GUARDED_POD = "guarded"
"""The pod of ``no-control-plane``, which a PodDisruptionBudget keeps from any eviction."""


async def _guard_a_pod(side: Side, pool: str) -> None:
    """A pod on the pool's Node and a PodDisruptionBudget that refuses its every eviction: a
    drain of that Node could never end."""
    (node,) = await side.pool_nodes(pool)
    labels = {"app": GUARDED_POD}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": GUARDED_POD, "labels": labels},
        "spec": {
            "nodeName": node["metadata"]["name"],
            "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": "example.invalid/app:1"}],
        },
    }
    await side.workload.create(PODS, pod, "default")
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": GUARDED_POD},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": labels}},
    }
    await side.workload.create(PDBS, budget, "default")


async def _guarded_pod_kept(side: Side) -> bool:
    pod = next(
        (
            p
            for p in (await side.workload.list(PODS, "default")).items
            if p["metadata"]["name"] == GUARDED_POD
        ),
        None,
    )
    return pod is not None and not pod["metadata"].get("deletionTimestamp")


async def _guarded_pod_still_there(side: Side, _pool: str) -> None:
    assert await _guarded_pod_kept(side), f"{side.name}: the guarded pod was evicted"


def _cordoned(objs: dict[str, Any]) -> bool:
    return any((node.get("spec") or {}).get("unschedulable") for node in objs["Nodes"])


def _draining(objs: dict[str, Any]) -> bool:
    (machine,) = objs["Machines"] or [{}]
    return condition(machine, "Deleting").get("reason") == "DrainingNode"


SCENARIOS = [
    Scenario("create", [create(3)]),
    Scenario("scale", [create(2), scale(4), scale(1)]),
    Scenario("zero", [create(1), scale(0), scale(2)]),
    Scenario(
        "paused-pool",
        [
            Step(
                "create paused by annotation",
                lambda side, pool: _create(side, pool, 2, annotations={PAUSED_ANNOTATION: "true"}),
                _paused,
            ),
            Step("unpause", _unpause_pool, running(2)),
        ],
    ),
    Scenario(
        "paused-cluster",
        [
            create(1),
            Step("pause the Cluster", lambda s, p: _pause_cluster(True, s, p), _paused),
            Step(
                "scale while paused",
                lambda side, pool: _scale(2, side, pool),
                lambda objs: _paused(objs) and status(objs).get("replicas") == 1,
            ),
            Step("unpause the Cluster", lambda s, p: _pause_cluster(False, s, p), running(2)),
        ],
    ),
    Scenario(
        "infra-late",
        [
            Step(
                "create without the infra pool",
                lambda side, pool: _create(side, pool, 2, without={SIM_MACHINE_POOLS}),
                lambda objs: bool(
                    (status(objs).get("initialization") or {}).get("bootstrapDataSecretCreated")
                ),
            ),
            Step("create the infra pool", _create_infra, running(2)),
        ],
    ),
    Scenario(
        "bootstrap-late",
        [
            Step(
                "create without the bootstrap config",
                lambda side, pool: _create(side, pool, 1, without={KUBEADM_CONFIGS}),
                lambda objs: bool(status(objs).get("phase")),
            ),
            Step("create the bootstrap config", _create_config, running(1)),
        ],
    ),
    Scenario(
        "delete",
        [
            create(2),
            Step(
                "delete the pool",
                _delete,
                lambda objs: objs["MachinePool"] is None and not objs["Machines"],
            ),
        ],
    ),
    Scenario(
        "bootstrap-data",
        [
            Step(
                "create with a config that reports its data created but names no Secret",
                _create_without_secret_name,
                lambda objs: bool(status(objs).get("phase")),
            ),
            Step(
                "unpause the config (our bootstrap provider names its Secret)",
                lambda side, pool: _pause_config(False, side, pool),
                lambda objs: running(1)(objs) and _data_secret_name(objs) == "bootstrap-data",
            ),
            Step(
                "rename the data Secret on the config's status",
                _rename_data_secret,
                lambda objs: (
                    running(1)(objs) and _data_secret_name(objs) == "bootstrap-data" + RENAMED
                ),
            ),
        ],
    ),
    Scenario(
        "infra-deleted",
        [
            create(1),
            Step("delete the infra pool", _delete_infra, _failure_reason),
        ],
    ),
    Scenario(
        "nodes-late",
        [
            Step(
                "create with instances whose kubelets do not join",
                _create_without_nodes,
                lambda objs: (
                    len(_provider_ids(objs)) == 2
                    and len(objs["Machines"]) == 2
                    and not objs["Nodes"]
                    and status(objs).get("replicas") == 2
                ),
            ),
            Step("start the kubelets: the Nodes join", _start_kubelets, running(2)),
        ],
    ),
    Scenario(
        "machineless-delete",
        [
            Step(
                "create without MachinePool Machines",
                _create_test_pool,
                _running_without_machines,
            ),
            Step("delete the pool", _delete, lambda objs: objs["MachinePool"] is None),
        ],
    ),
    Scenario(
        "infra-machine-failed",
        [
            Step(
                "create with a TestMachine for the instance",
                lambda side, pool: _create_test_pool(side, pool, machines=True),
                running(1),
            ),
            Step(
                "the TestMachine reports a terminal failure",
                _fail_test_machine,
                _machine_failed,
            ),
        ],
    ),
    Scenario(
        "no-control-plane",
        [
            create(1),
            Step("guard a pod on the Node with a budget", _guard_a_pod, running(1)),
            # No control-plane Machine and no controlPlaneRef: the Machine goes without a
            # drain, which the budget would hold forever, its Node never cordoned.
            Step(
                "scale to 0: no drain, the Machine goes",
                lambda side, pool: _scale(0, side, pool),
                lambda objs: not objs["Machines"] and not _cordoned(objs),
            ),
            Step("the guarded pod was never evicted", _guarded_pod_still_there, lambda _: True),
        ],
    ),
    Scenario(
        "drain-rules",
        [
            Step(
                "create with MachineDrainRules and a control-plane Machine",
                _create_with_drain_rules,
                running(1),
            ),
            Step("run a pod for each rule on the Node", _run_pods, running(1)),
            Step(
                "scale to 0: the drain evicts the order-0 pod only", _scale_down_to_drain, _draining
            ),
            Step(
                "the WaitCompleted pod ends: the order-10 pod is evicted, the Node goes",
                _complete_batch,
                lambda objs: not objs["Machines"] and not objs["Nodes"],
            ),
        ],
    ),
    Scenario(
        "autoscaler",
        [
            Step(
                "create with autoscaler sizes and no replicas",
                lambda side, pool: _create(side, pool, None, annotations=AUTOSCALER_SIZES),
                running(2),
            ),
        ],
    ),
    Scenario(
        "managed-by",
        [
            create(2),
            Step(
                "hand replicas to an autoscaler",
                _managed_by,
                lambda objs: _annotated(objs, REPLICAS_MANAGED_BY_ANNOTATION),
            ),
            Step(
                "scale by hand",
                lambda side, pool: _scale(3, side, pool),
                # The provider owns the size now and writes the instance count back.
                lambda objs: running(2)(objs) and objs["MachinePool"]["spec"]["replicas"] == 2,
            ),
        ],
    ),
    Scenario(
        "topology",
        [
            Step(
                "create a Cluster of a ClusterClass with a pool of 2",
                _create_topology,
                _running_at(TOPOLOGY_VERSION),
            ),
            Step(
                "bump the topology's version: the control plane, then the pool",
                _bump_topology_version,
                _running_at(TOPOLOGY_NEXT),
            ),
            Step(
                "name a new infra template in the ClusterClass: the pool rotates",
                _rotate_topology_template,
                lambda objs: (
                    _running_at(TOPOLOGY_NEXT)(objs) and _instance_types(objs) == {"sim.medium"}
                ),
            ),
        ],
        cluster=False,
    ),
]


@dataclass
class Sides:
    upstream: Client
    ours: Client
    client: Client
    workloads: dict[str, WorkloadCluster]
    procs: list[ControllerProcess] = field(default_factory=list)
    allowed_seen: set[str] = field(default_factory=set)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def sides(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Sides]:
    workdir = tmp_path_factory.mktemp("conformance")
    async with upstream_management(workdir) as (cp, client, binary, webhook):
        workloads = {
            name: await asyncio.to_thread(cp.start_workload, f"conf-{name}")
            for name in ("upstream", "ours")
        }
        procs: list[ControllerProcess] = [
            UpstreamProcess(
                name="upstream",
                kubeconfig=await upstream_access(cp, client, workdir),
                components="",
                log=workdir / "upstream.log",
                binary=binary,
                webhook=webhook,
                machine_pool=True,
                cluster_topology=True,
                extra_args=("--watch-filter=upstream",),
            ),
            # The topology scenario's Cluster on our side: upstream's topology controller, as
            # beside upstream, with its MachinePool gate off, for Clusters (and their
            # Machines, which none of ours are) labelled ``ours-topology`` only.
            UpstreamProcess(
                name="upstream-topology",
                kubeconfig=cp.kubeconfig,
                components="",
                log=workdir / "upstream-topology.log",
                binary=binary,
                webhook=dataclasses.replace(webhook, port=free_port()),
                cluster_topology=True,
                extra_args=(f"--watch-filter={TOPOLOGY_CLUSTER_FILTER['ours']}",),
            ),
            ControllerProcess(
                name="ours",
                kubeconfig=cp.kubeconfig,
                components="core",
                log=workdir / "ours.log",
                lease_name="machinepool-conformance-core",
                extra_args=("--watch-filter", "ours"),
            ),
            ControllerProcess(
                name="infra",
                kubeconfig=cp.kubeconfig,
                components="bootstrap,sim,kubelet",
                log=workdir / "infra.log",
                lease_name="machinepool-conformance-infra",
            ),
        ]
        for proc in procs:
            proc.start()
        try:
            for proc in procs:
                await proc.wait_ready(timeout=180)
            async with (
                await Client.from_kubeconfig(workloads["upstream"].kubeconfig) as up,
                await Client.from_kubeconfig(workloads["ours"].kubeconfig) as ours,
            ):
                yield Sides(up, ours, client, workloads, procs)
        finally:
            for proc in procs:
                proc.stop()


async def _agreeing(sides: list[Side], scenario: str, seen: set[str], last: list[str]) -> bool:
    """Whether the sides agree up to the listed differences; ``last`` gets the unlisted ones
    and ``seen`` the listed patterns that matched."""
    snapshots = []
    for side in sides:
        replacements = await side.replacements(scenario)
        snapshots.append(normalise(await side.pool_objects(scenario), replacements))
    found, used = compare(snapshots[0], snapshots[1], allowed_differences(), scenario)
    seen.update(used)
    last[:] = found
    return not found


async def _run(env: Sides, scenario: Scenario) -> list[str]:
    """Run ``scenario`` on both sides; the unlisted differences after each step."""
    sides = []
    for name, workload in (("upstream", env.upstream), ("ours", env.ours)):
        namespace = f"{scenario.name}-{'up' if name == 'upstream' else 'ours'}"
        if name == "upstream":
            await let_upstream_write(env.client, namespace)
        if scenario.cluster:
            await cluster_namespace(
                env.client,
                namespace,
                env.workloads[name],
                labels={"cluster.x-k8s.io/watch-filter": name},
            )
        elif name != "upstream":
            await env.client.create(NAMESPACES, {"metadata": {"name": namespace}})
        sides.append(Side(name, env.client, workload, namespace, env.workloads[name]))
    problems: list[str] = []
    for step in scenario.steps:
        await asyncio.gather(*(step.action(side, scenario.name) for side in sides))
        await asyncio.gather(
            *(
                until(side, scenario.name, step.done, f"{scenario.name}: {step.what}", STEP_TIMEOUT)
                for side in sides
            )
        )
        last: list[str] = []
        try:
            await eventually(
                lambda last=last: _agreeing(sides, scenario.name, env.allowed_seen, last),
                within=60,
                interval=1.0,
            )
        except TimeoutError:
            problems += [f"{scenario.name} after '{step.what}': {line}" for line in last]
            break
    return problems


async def test_machinepool_matches_upstream(sides: Sides) -> None:
    results = await asyncio.gather(*(_run(sides, s) for s in SCENARIOS), return_exceptions=True)
    problems = []
    for scenario, result in zip(SCENARIOS, results, strict=True):
        if isinstance(result, BaseException):
            problems.append(f"{scenario.name}: {type(result).__name__}: {result}")
        else:
            problems += result
    assert not problems, (
        "differences from upstream not listed in docs/upstream-differences.md:\n"
        + "\n".join(problems)
    )


async def test_every_listed_difference_still_occurs(sides: Sides) -> None:
    listed = {
        a.pattern
        for a in allowed_differences()
        if not a.sometimes and not a.pattern.startswith(BOOTSTRAP_ROWS)
    }
    stale = sorted(listed - sides.allowed_seen)
    assert not stale, f"docs/upstream-differences.md lists differences no scenario showed: {stale}"


@pytest.mark.parametrize(
    ("annotations", "replicas"),
    [
        (AUTOSCALER_SIZES, None),
        (AUTOSCALER_SIZES, 3),
        ({AUTOSCALER_MIN_SIZE_ANNOTATION: "2"}, None),
        ({AUTOSCALER_MAX_SIZE_ANNOTATION: "4"}, None),
        ({}, None),
    ],
)
async def test_replicas_defaulting_matches_upstream_webhook(
    sides: Sides, annotations: dict[str, str], replicas: int | None
) -> None:
    """The scenarios' MachinePools are all admitted by upstream's webhook (it is the one the
    management cluster calls), so ``autoscaler`` compares the controllers only. This compares
    the defaulting itself: what upstream's webhook stores for a create (dry run) against what
    ours defaults the same body to."""
    namespace = "defaulting"
    with contextlib.suppress(AlreadyExists):
        await sides.client.create(NAMESPACES, {"metadata": {"name": namespace}})
    body = machine_pool(namespace, "pool", replicas=replicas, annotations=annotations)
    admitted = await sides.client.create(MACHINE_POOLS, body, namespace, dry_run=True)
    ours = default_machine_pool(body)
    assert admitted["spec"]["replicas"] == ours["spec"]["replicas"]
    assert admitted["metadata"]["labels"] == ours["metadata"]["labels"]
