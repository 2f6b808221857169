"""What the pool commands do against the API: list, describe, scale, follow a rollout.

Each function takes a ``Target`` and returns something to print; ``CliError`` carries any
failure up to the command as one line.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table
from rich.tree import Tree

from machinepool.api.kinds import MACHINE_POOLS, MACHINES
from machinepool.api.meta import dig
from machinepool.cli import history
from machinepool.cli.kube import Target, connect, get_pool
from machinepool.cli.views import describe_tree, pool_table
from machinepool.runtime import contract_resource
from machinepool.runtime.kube.client import NODES, SECRETS, Client
from machinepool.runtime.kube.errors import ApiError, NotFound

Obj = dict[str, Any]
_POLL = 0.5


async def table(target: Target, *, all_namespaces: bool) -> Table:
    async with connect(target) as client:
        listed = await client.list(MACHINE_POOLS, None if all_namespaces else target.namespace)
    pools = sorted(listed.items, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))
    return pool_table(pools, namespaces=all_namespaces)


async def _ref_object(client: Client, ref: Obj | None, namespace: str) -> Obj | None:
    if not ref or not ref.get("kind"):
        return None
    try:
        res = await contract_resource(client, ref.get("apiGroup", ""), ref["kind"])
        return await client.get(res, ref["name"], namespace)
    except ApiError:
        return None


async def _workload_nodes(client: Client, cluster: str, namespace: str) -> dict[str, Obj]:
    """Nodes of the pool's workload cluster by providerID; empty when it is unreachable."""
    try:
        secret = await client.get(SECRETS, f"{cluster}-kubeconfig", namespace)
        kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["value"]))
        async with await Client.from_kubeconfig_dict(kubeconfig) as workload:
            nodes = (await workload.list(NODES)).items
    except (ApiError, OSError, KeyError, yaml.YAMLError):
        return {}
    return {n["spec"]["providerID"]: n for n in nodes if n.get("spec", {}).get("providerID")}


async def describe(target: Target, name: str) -> Tree:
    async with connect(target) as client:
        pool = await get_pool(client, name, target.namespace)
        tmpl = pool["spec"]["template"]["spec"]
        bootstrap = await _ref_object(
            client, tmpl.get("bootstrap", {}).get("configRef"), target.namespace
        )
        infra = await _ref_object(client, tmpl.get("infrastructureRef"), target.namespace)
        owned = await client.list(
            MACHINES,
            target.namespace,
            label_selector=f"cluster.x-k8s.io/cluster-name={pool['spec']['clusterName']}",
        )
        uid = pool["metadata"]["uid"]
        machines = [
            m
            for m in owned.items
            if any(o.get("uid") == uid for o in m["metadata"].get("ownerReferences", []))
        ]
        nodes = await _workload_nodes(client, pool["spec"]["clusterName"], target.namespace)
    return describe_tree(
        pool, bootstrap=bootstrap, infra=infra, machines=machines, nodes_by_provider_id=nodes
    )


async def scale(target: Target, name: str, replicas: int) -> None:
    async with connect(target) as client:
        await get_pool(client, name, target.namespace)
        await client.set_scale(MACHINE_POOLS, name, target.namespace, replicas)


def rolled_out(pool: Obj) -> bool:
    """Every desired replica is up to date, ready and available, runs the desired version, and
    status is current.

    The version check is what tells a rollout apart from its start: a pool Machine is UpToDate
    for as long as it is not being deleted (upstream's rule: the provider replaces outdated
    instances), so right after a version change every counter still says done.
    """
    spec, status = pool.get("spec", {}), pool.get("status") or {}
    desired = spec.get("replicas", 1)
    generation = pool["metadata"].get("generation")
    target = dig(spec, "template", "spec", "version")
    versions = [v.get("version") for v in status.get("versions") or [] if isinstance(v, dict)]
    return (
        status.get("observedGeneration") == generation
        and status.get("replicas") == desired
        and status.get("upToDateReplicas") == desired
        and status.get("readyReplicas") == desired
        and status.get("availableReplicas", desired) == desired
        and len(versions) <= 1
        and (target is None or all(v == target for v in versions))
    )


def failed(pool: Obj) -> str | None:
    """The terminal failure the core reported (it never sets phase Failed, as upstream)."""
    status = pool.get("status") or {}
    v1 = (status.get("deprecated") or {}).get("v1beta1") or {}
    if pool["metadata"].get("deletionTimestamp") or not (
        v1.get("failureReason") or v1.get("failureMessage")
    ):
        return None
    return str(v1.get("failureMessage") or v1.get("failureReason"))


async def follow(
    client: Client, name: str, namespace: str, timeout: float, on_sample: Any = None
) -> Obj | None:
    """Poll the pool until rolled out (return it), failed or timed out (return None)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pool = await client.get(MACHINE_POOLS, name, namespace)
        except NotFound:
            return None
        history.record(namespace, name, pool)
        if on_sample is not None:
            on_sample(pool)
        if failed(pool) or rolled_out(pool):
            return pool if not failed(pool) else None
        await asyncio.sleep(_POLL)
    return None


async def rollout_status(target: Target, name: str, timeout: float, console: Console) -> bool:
    async with connect(target) as client:
        await get_pool(client, name, target.namespace)
        progress = Progress(
            TextColumn("machinepool/{task.fields[pool]}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} up to date and ready  {task.fields[phase]}"),
            console=console,
            transient=False,
        )
        with progress:
            task = progress.add_task("rollout", total=1, pool=name, phase="")

            def show(pool: Obj) -> None:
                status = pool.get("status") or {}
                desired = pool["spec"].get("replicas", 1)
                done = min(status.get("upToDateReplicas", 0), status.get("readyReplicas", 0))
                progress.update(
                    task, total=max(desired, 1), completed=done, phase=status.get("phase", "")
                )

            result = await follow(client, name, target.namespace, timeout, show)
    return result is not None
