"""The Machine reconciler for Machines controlled by a MachinePool.

Built by ``machinepool.controllers.machine.setup``. For a live pool Machine it adds the
``machine.cluster.x-k8s.io`` finalizer, copies the infra machine's providerID, finds its Node
and sets nodeRef and the NodeReady / Ready / Available conditions the MachinePool counts. For a
deleted one it cordons and drains the Node (Eviction API, PDBs honoured, until
``spec.deletion.nodeDrainTimeoutSeconds``), deletes the infra machine and waits for it, deletes
the Node (unless ``nodeDeletionTimeoutSeconds`` passed) and drops the finalizer. Machines not
controlled by a MachinePool are left to whoever owns them.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from machinepool.api import constants as c
from machinepool.api.conditions import set_condition, set_v1beta1_condition
from machinepool.api.kinds import MACHINES
from machinepool.api.meta import deleted_for_move, dig, ensure, format_time, parse_time
from machinepool.controllers.common import (
    WorkloadNodes,
    is_deleting,
    node_inputs,
    now,
    ref_text,
    set_up_to_date,
)
from machinepool.controllers.machine import drain, status
from machinepool.controllers.machine.node import node_patch
from machinepool.controllers.machine.scope import Scope
from machinepool.runtime import (
    NODES,
    ClusterCache,
    ContractResolver,
    Controller,
    IndexFunc,
    Informer,
    Manager,
    Mapper,
    NotFound,
    Obj,
    ObjectKey,
    OwnReader,
    Resource,
    Result,
    controller_owner,
    get_logger,
    metadata_and_spec,
)
from machinepool.runtime.patch import Patcher

log = get_logger(__name__)
CONTROLLER_NAME = "machinepool-machine"
COMPONENT = "machinepool-machine-controller"
DRAIN_RETRY = 20.0
"""Seconds between drain rounds (upstream's interval), shortened to hit the drain timeout."""
BY_PROVIDER_ID = "machine.core/provider-id"
BY_NODE_NAME = "machine.core/node-name"
BY_INFRA_REF = "machine.core/infra-ref"


def _prefix(machine: Obj) -> str:
    return f"{dig(machine, 'metadata', 'namespace')}/{dig(machine, 'spec', 'clusterName')}/"


def _pool_owned(machine: Obj) -> bool:
    owner = controller_owner(machine)
    return owner is not None and owner.get("kind") == "MachinePool"


def _index_provider_id(m: Obj) -> list[str]:
    pid = dig(m, "spec", "providerID")
    return [_prefix(m) + str(pid)] if pid and _pool_owned(m) else []


def _index_node_name(m: Obj) -> list[str]:
    name = dig(m, "status", "nodeRef", "name")
    return [_prefix(m) + str(name)] if name and _pool_owned(m) else []


def _index_infra_ref(m: Obj) -> list[str]:
    ref = dig(m, "spec", "infrastructureRef", default={})
    ns = dig(m, "metadata", "namespace")
    return [f"{ns}/{ref.get('apiGroup')}/{ref.get('kind')}/{ref.get('name')}"] if ref else []


INDEXERS: dict[str, IndexFunc] = {
    BY_PROVIDER_ID: _index_provider_id,
    BY_NODE_NAME: _index_node_name,
    BY_INFRA_REF: _index_infra_ref,
}


class MachineReconciler:
    def __init__(self, mgr: Manager, cluster_cache: ClusterCache, *, concurrency: int = 4) -> None:
        self.client = mgr.client
        self.cache = mgr.cache
        self.cluster_cache = cluster_cache
        self.resolver = ContractResolver(mgr.client)
        self.recorder = mgr.event_recorder(COMPONENT)
        self.controller: Controller = mgr.new_controller(
            CONTROLLER_NAME, self.reconcile, concurrency=concurrency
        )
        self.machines: Informer
        self.reader: OwnReader
        self._watched: set[Resource] = set()
        self._watched_clusters: set[ObjectKey] = set()
        self._lock = asyncio.Lock()

    async def start_watches(self) -> None:
        self.machines = await self.cache.get_informer(MACHINES)
        for name, fn in INDEXERS.items():
            self.machines.add_indexer(name, fn)
        self.reader = OwnReader(self.client, MACHINES, self.machines)
        # Only this controller writes a pool Machine's status.
        self.controller.watch(self.machines, inputs=metadata_and_spec)

    def _node_mapper(self, cluster: ObjectKey) -> Mapper:
        prefix = f"{cluster.namespace}/{cluster.name}/"

        def mapper(node: Obj) -> list[ObjectKey]:
            found = self.machines.by_index(
                BY_NODE_NAME, prefix + str(dig(node, "metadata", "name"))
            )
            pid = dig(node, "spec", "providerID")
            if pid:
                found += self.machines.by_index(BY_PROVIDER_ID, prefix + str(pid))
            return list(dict.fromkeys(ObjectKey.of(m) for m in found))

        return mapper

    def _infra_mapper(self, obj: Obj) -> list[ObjectKey]:
        group = str(obj.get("apiVersion", "")).rpartition("/")[0]
        ns, name = dig(obj, "metadata", "namespace"), dig(obj, "metadata", "name")
        key = f"{ns}/{group}/{obj.get('kind')}/{name}"
        return [ObjectKey.of(m) for m in self.machines.by_index(BY_INFRA_REF, key)]

    async def infra_informer(self, resource: Resource) -> Informer:
        informer = await self.cache.get_informer(resource)
        async with self._lock:
            if resource not in self._watched:
                self._watched.add(resource)
                self.controller.watch(informer, self._infra_mapper)
        return informer

    async def nodes(self, cluster: ObjectKey) -> Informer:
        informer = await self.cluster_cache.get_informer(cluster, NODES)
        if cluster not in self._watched_clusters:
            await self.cluster_cache.watch(
                cluster, NODES, self.controller.handler(self._node_mapper(cluster), node_inputs)
            )
            self._watched_clusters.add(cluster)
        return informer

    # -- reconcile ------------------------------------------------------------------------

    async def reconcile(self, key: ObjectKey) -> Result:
        # From the cache, never older than our own last write (the patch on exit diffs
        # against this copy; see runtime.OwnReader).
        machine = await self.reader.get(key)
        if machine is None or not _pool_owned(machine):
            return Result()
        # A MachineHealthCheck and the pool's remediation write conditions here too: a status
        # patch that loses its lock to them (or to the pool's apply of the Machine's version)
        # is rebased onto their write, keeping their conditions (runtime.patch).
        patcher = Patcher(self.client, MACHINES, machine, on_patched=self.reader.wrote)
        finalizers = dig(machine, "metadata", "finalizers", default=[])
        if not is_deleting(machine) and c.MACHINE_FINALIZER not in finalizers:
            machine["metadata"]["finalizers"] = [*finalizers, c.MACHINE_FINALIZER]
            await patcher.patch(machine)
            return Result()
        scope = Scope(self, machine)
        try:
            await self._observe(scope)
            if is_deleting(machine):
                result = await reconcile_delete(scope)
            else:
                result = await reconcile_normal(scope)
            # Only a reconcile that went through says it saw this generation.
            ensure(machine, "status")["observedGeneration"] = dig(machine, "metadata", "generation")
        finally:
            set_up_to_date(machine)
            status.set_phase(machine)
            try:
                await patcher.patch(machine)
            except NotFound:
                if not is_deleting(machine):
                    raise
        return result

    async def _observe(self, scope: Scope) -> None:
        """Find the infra machine and the Node; fill ``spec.providerID`` from the former."""
        machine = scope.machine
        ref = dig(machine, "spec", "infrastructureRef", default={})
        if ref.get("kind") and ref.get("name"):
            try:
                resource = await self.resolver.resolve(str(ref.get("apiGroup")), str(ref["kind"]))
            except NotFound:
                resource = None
            if resource is not None:
                informer = await self.infra_informer(resource)
                scope.infra_machine = informer.get(str(ref["name"]), scope.key.namespace)
            scope.infra_machine_not_found = scope.infra_machine is None
        pid = dig(scope.infra_machine, "spec", "providerID")
        if pid and not dig(machine, "spec", "providerID"):
            machine["spec"]["providerID"] = str(pid)
        nodes = WorkloadNodes(await self.nodes(scope.cluster_key))
        node_name = dig(machine, "status", "nodeRef", "name")
        node = nodes.by_name(str(node_name)) if node_name else None
        pid = dig(machine, "spec", "providerID")
        if node is None and pid:
            node = nodes.by_provider_id(str(pid))
        scope.node = node


async def reconcile_normal(scope: Scope) -> Result:
    machine, node = scope.machine, scope.node
    if node is not None:
        name = str(dig(node, "metadata", "name"))
        machine_status = ensure(machine, "status")
        machine_status["nodeRef"] = {"name": name}
        if dig(node, "status", "nodeInfo"):
            machine_status["nodeInfo"] = node["status"]["nodeInfo"]
        patch = node_patch(machine, node)
        if patch is not None:
            wclient = await scope.reconciler.cluster_cache.get_client(scope.cluster_key)
            await wclient.patch(NODES, name, patch)
    status.set_infrastructure_provisioned(machine, scope.infra_machine)
    status.set_machine_conditions(machine, scope.infra_machine, node)
    wait = status.set_node_conditions(machine, node, now())
    return Result(requeue_after=wait) if wait else Result()


def _timed_out(start: str | None, timeout: object) -> tuple[bool, float]:
    """(passed, seconds left) for a timeout in seconds since ``start``; 0/None never passes."""
    if not isinstance(timeout, int) or timeout <= 0 or not start:
        return False, float("inf")
    try:
        left = (parse_time(start) + timedelta(seconds=timeout) - now()).total_seconds()
    except ValueError:
        return False, float("inf")
    return left <= 0, left


def _deleting(scope: Scope, reason: str, message: str) -> None:
    conditions = ensure(scope.machine, "status").setdefault("conditions", [])
    set_condition(
        conditions,
        c.DELETING_CONDITION,
        True,
        reason,
        message,
        dig(scope.machine, "metadata", "generation"),
    )


async def reconcile_delete(scope: Scope) -> Result:
    machine = scope.machine
    if deleted_for_move(machine):
        # clusterctl move deletes the source copy; the Machine lives on in the target
        # cluster, so its Node is neither drained nor deleted, nor its infra machine.
        _drop_finalizer(machine)
        _deleting(scope, c.DELETION_COMPLETED_REASON, "moved by clusterctl")
        return Result()
    deletion = dig(machine, "spec", "deletion", default={})
    node = scope.node
    wclient = await scope.reconciler.cluster_cache.get_client(scope.cluster_key)
    excluded = c.EXCLUDE_NODE_DRAINING_ANNOTATION in dig(
        machine, "metadata", "annotations", default={}
    )
    if node is not None and not excluded:
        deletion_status = ensure(machine, "status", "deletion")
        start = deletion_status.setdefault("nodeDrainStartTime", format_time(now()))
        passed, left = _timed_out(start, deletion.get("nodeDrainTimeoutSeconds"))
        if not passed:
            await drain.cordon(wclient, node)
            result = await drain.drain(wclient, str(dig(node, "metadata", "name")))
            if not result.done:
                _deleting(scope, c.DRAINING_NODE_REASON, result.message())
                set_v1beta1_condition(
                    ensure(machine, "status", "deprecated", "v1beta1").setdefault("conditions", []),
                    c.V1BETA1_DRAINING_SUCCEEDED_CONDITION,
                    False,
                    c.V1BETA1_DRAINING_REASON,
                    result.message(),
                    c.SEVERITY_INFO,
                )
                return Result(requeue_after=max(0.5, min(DRAIN_RETRY, left)))
        set_v1beta1_condition(
            ensure(machine, "status", "deprecated", "v1beta1").setdefault("conditions", []),
            c.V1BETA1_DRAINING_SUCCEEDED_CONDITION,
            True,
        )
    if scope.infra_machine is not None:
        ref = machine["spec"]["infrastructureRef"]
        text = ref_text(str(ref["kind"]), scope.key.namespace, str(ref["name"]))
        _deleting(
            scope, c.WAITING_FOR_INFRASTRUCTURE_DELETION_REASON, f"Waiting for {text} to be deleted"
        )
        if not dig(scope.infra_machine, "metadata", "deletionTimestamp"):
            resource = await scope.reconciler.resolver.resolve(
                str(ref["apiGroup"]), str(ref["kind"])
            )
            await scope.reconciler.client.delete(
                resource,
                str(ref["name"]),
                scope.key.namespace,
                uid=dig(scope.infra_machine, "metadata", "uid"),
            )
        return Result()  # the infra machine's delete event brings us back
    passed, _ = _timed_out(
        dig(machine, "metadata", "deletionTimestamp"), deletion.get("nodeDeletionTimeoutSeconds")
    )
    if node is not None and not passed:
        _deleting(scope, c.DELETING_NODE_REASON, f"Deleting Node {dig(node, 'metadata', 'name')}")
        log.info(
            "deleting the Node of a deleted Machine",
            node=dig(node, "metadata", "name"),
            machine=str(scope.key),
        )
        await wclient.delete(
            NODES, str(dig(node, "metadata", "name")), uid=dig(node, "metadata", "uid")
        )
    _drop_finalizer(machine)
    _deleting(scope, c.DELETION_COMPLETED_REASON, "")
    return Result()


def _drop_finalizer(machine: Obj) -> None:
    machine["metadata"]["finalizers"] = [
        f for f in dig(machine, "metadata", "finalizers", default=[]) if f != c.MACHINE_FINALIZER
    ]
