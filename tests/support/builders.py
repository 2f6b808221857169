"""JSON bodies of the objects tests create, in the style of upstream's ``builder`` package:
``machine_pool(namespace, name)`` is a valid MachinePool as it stands, and a test overrides
only what it is about with keywords.

- ``kubeadm_config``, ``sim_machine_pool``, ``machine_pool``: one object each.
- ``pool_objects``: the three a Sim pool is made of, all named ``name``, in creation order;
  ``create_pool`` creates them.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from typing import Any

from tests.support.resources import (
    KUBEADM_CONFIGS,
    MACHINE_HEALTH_CHECKS,
    MACHINE_POOLS,
    SIM_MACHINE_POOLS,
)

from machinepool.api import constants as c
from machinepool.runtime import Client, Obj, Resource
from machinepool.simworld.kubelet.node import PRESSURE_CONDITIONS

__all__ = [
    "CLUSTER",
    "VERSION",
    "create_pool",
    "healthy_node_conditions",
    "kubeadm_config",
    "machine_pool",
    "pool_objects",
    "sim_machine_pool",
]

CLUSTER = "work"
"""The Cluster a pool belongs to unless a test says otherwise."""
VERSION = "v1.34.0"
"""The Kubernetes version of a pool's template unless a test says otherwise."""

_JOIN: Obj = {"joinConfiguration": {"nodeRegistration": {}}}
_SMALL: Obj = {"template": {"instanceType": "sim.small"}}
TEST_BOOT: Obj = {"bootDelaySeconds": 1, "bootDelaySpreadSeconds": 2}
"""How a test's instances boot unless its spec says otherwise: 1-3 s each, each its own. The
Sim cloud's default, a cloud's 20-60 s, is more than a suite of hundreds of pools can wait;
a few seconds still make every wait on a booting instance real."""


def _object(
    res: Resource, namespace: str, name: str, labels: Mapping[str, str] | None, spec: Obj
) -> Obj:
    """An object of ``res``; ``labels`` only when given, as a test that sets none wrote it."""
    metadata: Obj = {"name": name, "namespace": namespace}
    if labels is not None:
        metadata["labels"] = dict(labels)
    return {"apiVersion": res.api_version, "kind": res.kind, "metadata": metadata, "spec": spec}


def kubeadm_config(
    namespace: str, name: str, *, labels: Mapping[str, str] | None = None, spec: Obj | None = None
) -> Obj:
    """A KubeadmConfig that joins a worker (``spec`` replaces the whole spec)."""
    spec = copy.deepcopy(_JOIN) if spec is None else spec
    return _object(KUBEADM_CONFIGS, namespace, name, labels, spec)


def sim_machine_pool(
    namespace: str, name: str, *, labels: Mapping[str, str] | None = None, spec: Obj | None = None
) -> Obj:
    """A SimMachinePool of ``small`` instances (``spec`` replaces the whole spec), booting as
    ``TEST_BOOT`` unless ``spec.sim`` sets a boot delay or spread."""
    spec = copy.deepcopy(_SMALL if spec is None else spec)
    sim = spec.setdefault("sim", {})
    if "bootDelaySeconds" not in sim and "bootDelaySpreadSeconds" not in sim:
        sim.update(TEST_BOOT)
    return _object(SIM_MACHINE_POOLS, namespace, name, labels, spec)


def machine_pool(
    namespace: str,
    name: str,
    *,
    replicas: int | None = 1,
    cluster: str = CLUSTER,
    version: str | None = VERSION,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    failure_domains: list[str] | None = None,
    bootstrap: str | None = None,
    infrastructure: str | None = None,
    infrastructure_group: str = c.INFRASTRUCTURE_GROUP,
    infrastructure_kind: str = SIM_MACHINE_POOLS.kind,
    template: Obj | None = None,
    spec: Obj | None = None,
) -> Obj:
    """A MachinePool of ``replicas`` in ``cluster`` whose template refers to the KubeadmConfig
    ``bootstrap`` and the SimMachinePool ``infrastructure`` (both default to ``name``).

    ``replicas=None`` or ``version=None`` leaves that field unset: admission defaults
    replicas, and a bootstrap test has no use for a version. ``template`` and ``spec`` are
    merged last over the template's spec and the spec: what a test is about.
    """
    template_spec: Obj = {
        "clusterName": cluster,
        "bootstrap": {
            "configRef": {
                "apiGroup": c.BOOTSTRAP_GROUP,
                "kind": KUBEADM_CONFIGS.kind,
                "name": bootstrap or name,
            }
        },
        "infrastructureRef": {
            "apiGroup": infrastructure_group,
            "kind": infrastructure_kind,
            "name": infrastructure or name,
        },
    }
    if version is not None:
        template_spec["version"] = version
    template_spec.update(copy.deepcopy(template or {}))
    pool: Obj = {"clusterName": cluster, "template": {"spec": template_spec}}
    if replicas is not None:
        pool["replicas"] = replicas
    if failure_domains is not None:
        pool["failureDomains"] = failure_domains
    pool.update(copy.deepcopy(spec or {}))
    body = _object(MACHINE_POOLS, namespace, name, labels, pool)
    if annotations is not None:
        body["metadata"]["annotations"] = dict(annotations)
    return body


def pool_objects(
    namespace: str,
    name: str,
    *,
    sim_spec: Obj | None = None,
    labels: Mapping[str, str] | None = None,
    **pool: Any,
) -> list[tuple[Resource, Obj]]:
    """KubeadmConfig, SimMachinePool (``sim_spec``) and MachinePool (``pool``: the keywords of
    ``machine_pool``) named ``name``, with their Resources, in the order to create them.

    ``labels`` go on all three and on the MachinePool's Machine template, so the pool's
    Machines carry them too: what a manager's ``--watch-filter`` needs to see the whole pool.
    """
    mp = machine_pool(namespace, name, labels=labels, **pool)
    if labels is not None:
        mp["spec"]["template"]["metadata"] = {"labels": dict(labels)}
    return [
        (KUBEADM_CONFIGS, kubeadm_config(namespace, name, labels=labels)),
        (SIM_MACHINE_POOLS, sim_machine_pool(namespace, name, labels=labels, spec=sim_spec)),
        (MACHINE_POOLS, mp),
    ]


async def create_pool(
    client: Client,
    namespace: str,
    name: str,
    *,
    without: Collection[Resource] = (),
    **overrides: Any,
) -> None:
    """Create ``pool_objects(namespace, name, **overrides)`` but those of ``without``: a
    MachinePool whose infra pool or bootstrap config is to come later."""
    for res, body in pool_objects(namespace, name, **overrides):
        if res not in without:
            await client.create(res, body, namespace)


def health_check(
    namespace: str,
    pool: str,
    *,
    unhealthy: Collection[str] = ("False",),
    cluster: str = CLUSTER,
    checks: Obj | None = None,
) -> Obj:
    """A MachineHealthCheck ``pool`` over the Machines of MachinePool ``pool``: unhealthy once
    its Node's Ready condition has had one of the ``unhealthy`` statuses for a second
    (``checks`` merged over its ``spec.checks``)."""
    conditions = [{"type": "Ready", "status": s, "timeoutSeconds": 1} for s in unhealthy]
    return {
        "apiVersion": MACHINE_HEALTH_CHECKS.api_version,
        "kind": "MachineHealthCheck",
        "metadata": {"name": pool, "namespace": namespace},
        "spec": {
            "clusterName": cluster,
            "selector": {"matchLabels": {c.POOL_NAME_LABEL: c.pool_name_label_value(pool)}},
            "checks": {"unhealthyNodeConditions": conditions, **(checks or {})},
        },
    }


def healthy_node_conditions() -> list[Obj]:
    """The conditions of a healthy kubelet's Node: Ready, and no memory, disk or PID pressure
    (a Machine's NodeHealthy, upstream's and ours, is Unknown until all four are reported)."""
    ready: Obj = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    return [ready] + [
        {"type": kind, "status": "False", "reason": reason} for kind, reason in PRESSURE_CONDITIONS
    ]
