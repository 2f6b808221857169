"""The Machine reconciler for Machines controlled by a MachinePool.

Built by ``machinepool.controllers.machine.setup``. For a live pool Machine it adds the
``machine.cluster.x-k8s.io`` finalizer, copies the infra machine's providerID, finds its Node
and sets nodeRef and the NodeReady / Ready / Available conditions the MachinePool counts. For a
deleted one it waits for its pre-drain hooks, cordons and drains the Node (Eviction API, PDBs
honoured, until ``spec.deletion.nodeDrainTimeoutSeconds``), waits for the Node's volumes to be
detached (until ``nodeVolumeDetachTimeoutSeconds``), waits for its pre-terminate hooks,
deletes the infra machine and waits for it, deletes the Node (unless
``nodeDeletionTimeoutSeconds`` passed) and drops the finalizer; as upstream, the drain and the
volume wait are skipped once the infra machine is gone or going, and the Node is left alone
(no pre-drain hooks, drain, volume wait or Node deletion) while the Cluster or the object its
controlPlaneRef names is being deleted, and when no control-plane Machine of the Cluster is
left, unless that object says the control plane is externally managed. The drain
follows the MachineDrainRules of the Machine's namespace.
While its Cluster or the Machine itself is paused it only reports so (the Paused condition).
A Machine whose Cluster does not exist is retried with backoff and left untouched, as upstream
leaves it. Machines not controlled by a MachinePool are left to whoever owns them. Upstream's
v1beta1 conditions go in ``status.deprecated.v1beta1`` beside the v1beta2 ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from machinepool.api import constants as c
from machinepool.api.conditions import set_condition, set_v1beta1_condition
from machinepool.api.contract import InfraMachine
from machinepool.api.kinds import CLUSTERS, MACHINE_DRAIN_RULES, MACHINE_POOLS, MACHINES
from machinepool.api.meta import deleted_for_move, dig, ensure, format_time, parse_time
from machinepool.api.views import (
    ClusterView,
    Field,
    MachineDeletionStatusView,
    MachinePoolView,
    MachineView,
    NodeView,
    ObjectView,
)
from machinepool.controllers.common import (
    WorkloadNodes,
    node_inputs,
    now,
    ref_text,
    set_paused_condition,
    set_up_to_date,
)
from machinepool.controllers.machine import drain, status, volumes
from machinepool.controllers.machine.node import node_patch
from machinepool.controllers.machine.scope import Env, Scope
from machinepool.runtime import (
    NODES,
    Client,
    ClusterCache,
    Conflict,
    ContractResolver,
    Controller,
    ExpectedError,
    IndexFunc,
    Informer,
    Manager,
    Mapper,
    NotFound,
    Obj,
    ObjectKey,
    Outcome,
    OwnReader,
    Patcher,
    Phase,
    Resource,
    Result,
    Steps,
    Stop,
    Then,
    controller_owner,
    get_logger,
    metadata_and_spec,
)

log = get_logger(__name__)
CONTROLLER_NAME = "machinepool-machine"
COMPONENT = "machinepool-machine-controller"
DRAIN_RETRY = 20.0
"""Seconds between drain rounds (upstream's interval), shortened to hit the drain timeout."""
VOLUME_DETACH_RETRY = 20.0
"""Seconds between looks at a drained Node's attached volumes (upstream's interval); a change
of the Node's ``status.volumesAttached`` brings the Machine back sooner."""
BY_PROVIDER_ID = "machine.core/provider-id"
BY_NODE_NAME = "machine.core/node-name"
BY_INFRA_REF = "machine.core/infra-ref"
BY_CLUSTER = "machine.core/cluster"
BY_POOL = "machine.core/pool"


def _prefix(machine: MachineView) -> str:
    return f"{machine.metadata.namespace}/{machine.spec.cluster_name}/"


def _pool_owned(machine: Obj) -> bool:
    owner = controller_owner(machine)
    return owner is not None and owner.get("kind") == "MachinePool"


def _index_provider_id(m: Obj) -> list[str]:
    machine = MachineView(m)
    pid = machine.spec.provider_id
    return [_prefix(machine) + str(pid)] if pid and _pool_owned(m) else []


def _index_node_name(m: Obj) -> list[str]:
    machine = MachineView(m)
    name = machine.status.node_ref.name
    return [_prefix(machine) + str(name)] if name and _pool_owned(m) else []


def _index_infra_ref(m: Obj) -> list[str]:
    machine = MachineView(m)
    ref = machine.spec.infrastructure_ref
    if not ref.raw:
        return []
    return [f"{machine.metadata.namespace}/{ref.api_group}/{ref.kind}/{ref.name}"]


def _index_cluster(m: Obj) -> list[str]:
    return [_prefix(MachineView(m))] if _pool_owned(m) else []


def _index_pool(m: Obj) -> list[str]:
    owner = controller_owner(m)
    if owner is None or owner.get("kind") != "MachinePool":
        return []
    return [f"{ObjectView(m).metadata.namespace}/{owner.get('name')}"]


INDEXERS: dict[str, IndexFunc] = {
    BY_POOL: _index_pool,
    BY_PROVIDER_ID: _index_provider_id,
    BY_NODE_NAME: _index_node_name,
    BY_INFRA_REF: _index_infra_ref,
    BY_CLUSTER: _index_cluster,
}


def machine_node_inputs(node: Obj) -> tuple[object, ...]:
    """What a pool Machine reads from its Node: what the core counts, the volumes a deletion
    waits to see detached, and the labels, annotations and taints it keeps in line with the
    Machine (``node.node_patch``), so a Node someone edited is put back at once. The echo of
    its own patch of them costs one reconcile that finds the Node in line; heartbeats still
    wake nothing."""
    meta = node.get("metadata") or {}
    return (
        *node_inputs(node),
        NodeView(node).status.volumes_attached,
        meta.get("labels"),
        meta.get("annotations"),
        NodeView(node).spec.taints,
    )


def pool_inputs(pool: Obj) -> tuple[object, ...]:
    """What a pool Machine reads from its MachinePool (gate ``MachinePoolNodeTaints`` only):
    the template's taints, which it keeps on its Node (``poolnode``); the template's labels
    reach it through the Machine's own, which the pool applies."""
    return (MachinePoolView(pool).spec.template.spec.taints,)


HEALTH_CHECK_MARKS = (
    c.V1BETA1_HEALTH_CHECK_SUCCEEDED_CONDITION,
    c.V1BETA1_OWNER_REMEDIATED_CONDITION,
)
"""The v1beta1 conditions a health check writes on a Machine's status, which the Machine's
v1beta1 Ready sums up."""


def machine_inputs(machine: Obj) -> tuple[object, ...]:
    """What a pool Machine's reconcile reads of its own Machine (``Controller.watch``'s
    ``inputs``): its metadata and spec, and of its status only what another controller
    writes there, a health check's v1beta1 marks. Its own status writes wake nothing: it
    reads them back through ``OwnReader``."""
    listed = MachineView(machine).status.v1beta1.conditions or []
    marks = [
        cond for cond in listed if isinstance(cond, dict) and cond.get("type") in HEALTH_CHECK_MARKS
    ]
    return (*metadata_and_spec(machine), marks)


def cluster_inputs(cluster: Obj) -> tuple[object, ...]:
    """What a pool Machine reads from its Cluster (``Controller.watch``'s ``inputs``): whether
    it is paused, whether it is being deleted and its controlPlaneRef (both decide whether the
    Node is left alone), and its labels (MachineDrainRules select Clusters by them)."""
    view = ClusterView(cluster)
    return (
        bool(view.spec.paused),
        view.deleting,
        view.spec.control_plane_ref.raw,
        view.metadata.labels,
    )


class ClusterNotFound(ExpectedError):
    """The Machine's Cluster does not exist (yet). Upstream's Machine controller fails the
    reconcile then, before the finalizer or any condition, and retries with backoff; so do
    we, and the Cluster's creation brings the Machine back sooner."""


class InfraMachineLost(ExpectedError):
    """The infra machine or the Node of a live, provisioned Machine is gone: the conditions and
    failure fields say so, and the reconcile fails as upstream's does (retried with backoff,
    ``observedGeneration`` left behind)."""


class MachineReconciler:
    def __init__(
        self,
        mgr: Manager,
        cluster_cache: ClusterCache,
        *,
        concurrency: int = 4,
        pool_node_taints: bool = False,
    ) -> None:
        self.pool_node_taints = pool_node_taints
        """Gate ``MachinePoolNodeTaints``: keep the owning pool's template taints on the Node."""
        self.client = mgr.client
        self.cache = mgr.cache
        self.cluster_cache = cluster_cache
        self.resolver = ContractResolver(mgr.client)
        self.recorder = mgr.event_recorder(COMPONENT)
        self.controller: Controller = mgr.new_controller(
            CONTROLLER_NAME, self.reconcile, concurrency=concurrency
        )
        self.machines: Informer
        self.clusters: Informer
        self.drain_rules: Informer
        self.pools: Informer | None = None
        """The MachinePools, read for their template taints (gate on only)."""
        self.steps: MachineSteps
        self._watched: set[Resource] = set()
        self._watched_clusters: set[ObjectKey] = set()
        self._lock = asyncio.Lock()

    async def start_watches(self) -> None:
        self.machines = await self.cache.get_informer(MACHINES)
        for name, fn in INDEXERS.items():
            self.machines.add_indexer(name, fn)
        # This controller writes a pool Machine's status, but for a health check's marks.
        self.controller.watch(self.machines, inputs=machine_inputs)
        # Pausing, resuming or deleting a Cluster wakes its pool Machines: the Paused
        # condition says so at once, a deletion held while paused resumes, and one waiting for
        # hooks or a drain lets the Node be, without waiting for a resync (upstream's Machine
        # controller waits for one).
        self.clusters = await self.cache.get_informer(CLUSTERS)
        self.controller.watch(self.clusters, self._cluster_mapper, cluster_inputs)
        # Read by each drain round (as upstream's drain reads them, without a watch: a drain
        # comes back every DRAIN_RETRY seconds anyway).
        self.drain_rules = await self.cache.get_informer(MACHINE_DRAIN_RULES)
        if self.pool_node_taints:
            # A change of a pool's template taints reaches its Machines' Nodes at once.
            self.pools = await self.cache.get_informer(MACHINE_POOLS)
            self.controller.watch(self.pools, self._pool_mapper, pool_inputs)
        env = Env(
            client=self.client,
            cluster_cache=self.cluster_cache,
            resolver=self.resolver,
            recorder=self.recorder,
            drain_rules=self.drain_rules,
            watches=self,
        )
        # From the cache, never older than our own last write (the patch on exit diffs
        # against this copy; see runtime.OwnReader).
        reader = OwnReader(self.client, MACHINES, self.machines)
        self.steps = MachineSteps(env, reader, self.clusters)

    def _pool_mapper(self, pool: Obj) -> list[ObjectKey]:
        key = f"{ObjectView(pool).metadata.namespace}/{ObjectView(pool).metadata.name}"
        return [ObjectKey.of(m) for m in self.machines.by_index(BY_POOL, key)]

    def pool_taints(self, machine: MachineView) -> list[Obj] | None:
        """The owning pool's template taints to keep on the Machine's Node, or None to leave
        the Node's taints alone (gate off, or the pool not in the cache)."""
        owner = controller_owner(machine.raw)
        if self.pools is None or owner is None:
            return None
        pool = self.pools.get(str(owner.get("name")), machine.metadata.namespace)
        if pool is None or ObjectView(pool).metadata.uid != owner.get("uid"):
            return None
        return list(MachinePoolView(pool).spec.template.spec.taints or [])

    def _cluster_mapper(self, cluster: Obj) -> list[ObjectKey]:
        meta = ClusterView(cluster).metadata
        prefix = f"{meta.namespace}/{meta.name}/"
        return [ObjectKey.of(m) for m in self.machines.by_index(BY_CLUSTER, prefix)]

    def _node_mapper(self, cluster: ObjectKey) -> Mapper:
        prefix = f"{cluster.namespace}/{cluster.name}/"

        def mapper(node: Obj) -> list[ObjectKey]:
            found = self.machines.by_index(BY_NODE_NAME, prefix + str(NodeView(node).metadata.name))
            pid = NodeView(node).spec.provider_id
            if pid:
                found += self.machines.by_index(BY_PROVIDER_ID, prefix + str(pid))
            return list(dict.fromkeys(ObjectKey.of(m) for m in found))

        return mapper

    def _infra_mapper(self, obj: Obj) -> list[ObjectKey]:
        group = str(obj.get("apiVersion", "")).rpartition("/")[0]
        ns, name = ObjectView(obj).metadata.namespace, ObjectView(obj).metadata.name
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
                cluster,
                NODES,
                self.controller.handler(self._node_mapper(cluster), machine_node_inputs),
            )
            self._watched_clusters.add(cluster)
        return informer

    # -- reconcile ------------------------------------------------------------------------

    async def reconcile(self, key: ObjectKey) -> Result:
        return await self.steps.reconcile(key)


class MachineSteps(Steps[Scope]):
    """One pool-Machine reconcile, as ``runtime.drive`` runs it: a chain (the deletion and
    the Node bookkeeping both need what observe found), then the conditions and phase.

    A MachineHealthCheck and the pool's remediation write conditions here too: a status
    patch that loses its lock to them (or to the pool's apply of the Machine's version) is
    rebased onto their write, keeping their conditions (runtime.kube.patch)."""

    kind = "Machine"
    chain = True

    def __init__(self, env: Env, reader: OwnReader, clusters: Informer) -> None:
        self.env = env
        self.reader = reader
        self.clusters = clusters

    def scope(self, key: ObjectKey, obj: Obj, patcher: Patcher) -> Scope | Stop:
        if not _pool_owned(obj):
            return Stop(then=Then.NOTHING)  # left to whoever owns it
        machine = MachineView(obj)
        cluster_name = str(machine.spec.cluster_name or "")
        found = self.clusters.get(cluster_name, key.namespace)
        if found is None:
            raise ClusterNotFound(
                f"Cluster {key.namespace}/{cluster_name} of Machine {key} does not exist"
            )
        return Scope(self.env, machine, ClusterView(found))

    def guards(self, scope: Scope) -> Sequence[Phase[Scope]]:
        return (add_finalizer, stop_if_paused)

    def phases(self, scope: Scope) -> Sequence[Phase[Scope]]:
        return DELETE_PHASES if scope.machine.deleting else NORMAL_PHASES

    async def report(self, scope: Scope, outcome: Outcome) -> Outcome:
        machine = scope.machine
        if machine.deleting:
            status.set_deleting_conditions(machine, scope.infra_machine, scope.node, now())
        set_up_to_date(machine)
        status.set_phase(machine)
        status.set_v1beta1_ready(machine)
        return Outcome()


async def add_finalizer(scope: Scope) -> Result:
    """Add the ``machine.cluster.x-k8s.io`` finalizer to a live Machine, alone in its write."""
    machine = scope.machine
    finalizers = machine.metadata.finalizers or []
    if machine.deleting or c.MACHINE_FINALIZER in finalizers:
        return Result()
    machine.metadata.finalizers = [*finalizers, c.MACHINE_FINALIZER]
    return Stop(then=Then.WRITE)


async def stop_if_paused(scope: Scope) -> Result:
    """Set the Paused condition; paused, nothing else. Not paused, the condition goes out
    with the rest of the status."""
    machine = scope.machine
    if set_paused_condition(machine, machine.status.edit_conditions(), scope.cluster, "Machine"):
        return Stop(then=Then.WRITE)
    return Result()


async def observe(scope: Scope) -> Result:
    """Find the infra machine and the Node; fill ``spec.providerID`` from the former."""
    machine, env = scope.machine, scope.env
    ref = machine.spec.infrastructure_ref
    if ref.kind and ref.name:
        try:
            resource = await env.resolver.resolve(str(ref.api_group), str(ref.kind))
        except NotFound:
            resource = None
        if resource is not None:
            informer = await env.watches.infra_informer(resource)
            scope.infra_machine = informer.get(str(ref.name), scope.key.namespace)
        scope.infra_machine_not_found = scope.infra_machine is None
    infra_pid = InfraMachine(scope.infra_machine).provider_id if scope.infra_machine else ""
    if infra_pid and not machine.spec.provider_id:
        machine.spec.provider_id = infra_pid
    if infra_pid:
        _copy_placement(machine, scope.infra_machine)
    nodes = WorkloadNodes(await env.watches.nodes(scope.cluster_key))
    node_name = machine.status.node_ref.name
    node = nodes.by_name(str(node_name)) if node_name else None
    pid = machine.spec.provider_id
    if node is None and pid:
        node = nodes.by_provider_id(str(pid))
    scope.node = node
    return Result()


async def report_v1beta1(scope: Scope) -> Result:
    """Upstream's v1beta1 InfrastructureReady and NodeHealthy from what observe found, and
    the v1beta1 failure fields: the infra machine's own terminal failure (a v1beta1-contract
    provider's ``status.failureReason``/``failureMessage``), or the loss of a live Machine's
    provisioned infra machine."""
    machine, infra_machine = scope.machine, scope.infra_machine
    status.set_v1beta1_infrastructure_ready(machine, infra_machine)
    status.set_v1beta1_node_healthy(machine, infra_machine, scope.node)
    v1beta1 = machine.status.v1beta1
    if infra_machine is not None:
        failed = InfraMachine(infra_machine)
        if failed.failure_reason:
            v1beta1.failure_reason = failed.failure_reason
        if failed.failure_message:
            v1beta1.failure_message = failed.failure_detected()
    if _infra_machine_lost(scope):
        ref = machine.spec.infrastructure_ref
        v1beta1.failure_reason = c.INVALID_CONFIGURATION_ERROR
        v1beta1.failure_message = (
            f"Machine infrastructure resource {ref.kind} {scope.key.namespace}/{ref.name}"
            " has been deleted after provisioning was completed"
        )
    return Result()


def _infra_machine_lost(scope: Scope) -> bool:
    """A live Machine's infra machine is gone after it was provisioned."""
    return (
        scope.infra_machine_not_found
        and not scope.machine.deleting
        and bool(scope.machine.status.initialization.infrastructure_provisioned)
    )


def _lost(scope: Scope) -> list[str]:
    """What a live Machine lost that upstream fails its reconcile for: its provisioned infra
    machine, or the Node its nodeRef names."""
    machine, lost = scope.machine, []
    if _infra_machine_lost(scope):
        ref = machine.spec.infrastructure_ref
        lost.append(f"could not find {ref_text(str(ref.kind), scope.key.namespace, str(ref.name))}")
    name = machine.status.node_ref.name
    if scope.node is None and name and machine.spec.provider_id:
        lost.append(f"no matching Node for its nodeRef {name}")
    return lost


def _copy_placement(machine: MachineView, infra_machine: Obj | None) -> None:
    """Where the instance runs, as the infra machine says once it has a providerID (as
    upstream's Machine controller copies them): spec.failureDomain, status.failureDomain and
    status.addresses, each only when the infra machine has it, copied as it has it (the
    contract does not type them)."""
    value = dig(infra_machine, "spec", "failureDomain")
    if value is not None:
        machine.spec.failure_domain = value
    value = dig(infra_machine, "status", "failureDomain")
    if value is not None:
        machine.status.failure_domain = value
    value = dig(infra_machine, "status", "addresses")
    if value is not None:
        machine.status.addresses = value


async def reconcile_normal(scope: Scope) -> Result:
    """Record the Node (nodeRef, nodeInfo, its labels and annotations) and the conditions."""
    machine, node = scope.machine, scope.node
    if node is not None:
        name = str(NodeView(node).metadata.name)
        machine.status.node_ref.name = name  # the reference's one field (MachineNodeReference)
        if NodeView(node).status.node_info.raw:
            # The Node's nodeInfo copied whole, as it has it: through the raw status, as the
            # view of nodeInfo names only what is read from it.
            ensure(machine.raw, "status")["nodeInfo"] = node["status"]["nodeInfo"]
        # The version the MachinePool controller gives its Machines (upstream's rule: the
        # Node's kubelet version), written here with the nodeRef the same Node brings: the
        # spec patch and the status patch that observes it (runtime.kube.patch) go out together,
        # where the pool's apply of the version would cost the status another write for the
        # new generation, and a lost lock when it lands mid-reconcile. The pool then finds
        # the version there and applies nothing.
        version = NodeView(node).status.node_info.kubelet_version
        if version and machine.spec.version != version:
            machine.spec.version = str(version)
        patch = node_patch(machine, node, scope.env.watches.pool_taints(machine))
        if patch is not None:
            await _patch_node(scope, node, patch)
    status.set_infrastructure_provisioned(machine, scope.infra_machine)
    status.set_machine_conditions(machine, scope.infra_machine, node)
    wait = status.set_node_conditions(machine, node, now())
    lost = _lost(scope)
    if lost:
        raise InfraMachineLost(f"{scope.text}: {'; '.join(lost)}")
    return Result(requeue_after=wait) if wait else Result()


async def _patch_node(scope: Scope, node: Obj, patch: Obj) -> None:
    """Patch the Node (once for this view of it: ``ClusterCache.patch_once``); when its taints
    changed since our copy (the lock of a patch that drops the uninitialized taint), re-read
    it once and send what is still due."""
    cache = scope.env.cluster_cache
    try:
        await cache.patch_once(scope.cluster_key, NODES, node, patch)
    except Conflict:
        wclient = await cache.get_client(scope.cluster_key)
        name = str(NodeView(node).metadata.name)
        pool_taints = scope.env.watches.pool_taints(scope.machine)
        again = node_patch(scope.machine, await wclient.get(NODES, name), pool_taints)
        if again is not None:
            await wclient.patch(NODES, name, again)


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
    set_condition(
        scope.machine.status.edit_conditions(),
        c.DELETING_CONDITION,
        True,
        reason,
        message,
        scope.machine.metadata.generation,
    )


@dataclass(frozen=True)
class _Hook:
    """A kind of deletion lifecycle hook: annotations with ``prefix`` hold the deletion."""

    prefix: str
    started: Field[str | None]
    """The ``status.deletion`` field recording when the wait began."""
    v1beta1_condition: str
    reason: str
    """The Deleting condition's reason while waiting."""
    name: str


PRE_DRAIN = _Hook(
    c.PRE_DRAIN_DELETE_HOOK_ANNOTATION_PREFIX,
    MachineDeletionStatusView.wait_for_pre_drain_hook_start_time,
    c.V1BETA1_PRE_DRAIN_DELETE_HOOK_SUCCEEDED_CONDITION,
    c.WAITING_FOR_PRE_DRAIN_HOOK_REASON,
    "pre-drain",
)
PRE_TERMINATE = _Hook(
    c.PRE_TERMINATE_DELETE_HOOK_ANNOTATION_PREFIX,
    MachineDeletionStatusView.wait_for_pre_terminate_hook_start_time,
    c.V1BETA1_PRE_TERMINATE_DELETE_HOOK_SUCCEEDED_CONDITION,
    c.WAITING_FOR_PRE_TERMINATE_HOOK_REASON,
    "pre-terminate",
)


def _waiting_for_hooks(scope: Scope, hook: _Hook) -> bool:
    """Whether ``hook``'s annotations hold the deletion; if so, say which ones and since when.

    Their owners remove the annotations when done; that change to the Machine brings the
    reconcile back, so nothing is requeued.
    """
    machine = scope.machine
    annotations = machine.metadata.annotations or {}
    hooks = sorted(k for k in annotations if k.startswith(hook.prefix))
    if not hooks:
        set_v1beta1_condition(
            machine.status.v1beta1.edit_conditions(), hook.v1beta1_condition, True
        )
        return False
    log.info(f"waiting for {hook.name} hooks", machine=str(scope.key), hooks=",".join(hooks))
    deletion = machine.status.deletion
    if hook.started.__get__(deletion, MachineDeletionStatusView) is None:
        hook.started.__set__(deletion, format_time(now()))
    set_v1beta1_condition(
        machine.status.v1beta1.edit_conditions(),
        hook.v1beta1_condition,
        False,
        c.V1BETA1_WAITING_EXTERNAL_HOOK_REASON,
        "",
        c.SEVERITY_INFO,
    )
    _deleting(
        scope, hook.reason, f"Waiting for {hook.name} hooks to succeed (hooks: {','.join(hooks)})"
    )
    return True


async def _node_left_alone(scope: Scope) -> str | None:
    """Why the deletion must not touch the Node (its pre-drain hooks, drain, volume wait and
    the Node's deletion), as upstream's ``isDeleteNodeAllowed`` decides it for a pool
    Machine, or ``None`` when it may: not while the Cluster is being deleted (the workload
    cluster goes as a whole), nor for a Machine that never had a Node, nor while the
    control-plane object of the Cluster's ``controlPlaneRef`` is being deleted; and unless
    that control plane is externally managed (``status.externalManagedControlPlane``: EKS,
    AKS, our local environments), not when no control-plane Machine of the Cluster is left,
    whether or not the Cluster names a control plane."""
    if scope.cluster.deleting:
        return "its Cluster is being deleted"
    if scope.node is None and not scope.machine.status.node_ref.name:
        return "it has no Node"
    ref = scope.cluster.spec.control_plane_ref
    env, namespace = scope.env, scope.key.namespace
    control_plane: Obj | None = None
    if ref.kind and ref.name:
        try:
            resource = await env.resolver.resolve(str(ref.api_group), str(ref.kind))
            control_plane = await env.client.get(resource, str(ref.name), namespace)
        except NotFound:
            log.info(
                "the control-plane object of the Cluster does not exist",
                control_plane=ref_text(str(ref.kind), namespace, str(ref.name)),
            )
    if control_plane is not None:
        if ObjectView(control_plane).metadata.deletion_timestamp:
            return "its control plane is being deleted"
        if dig(control_plane, "status", "externalManagedControlPlane") is True:
            return None
    selector = f"{c.CLUSTER_NAME_LABEL}={scope.cluster_key.name},{c.CONTROL_PLANE_LABEL}"
    found = await env.client.list(MACHINES, namespace, label_selector=selector)
    if not any(not ObjectView(m).metadata.deletion_timestamp for m in found.items):
        return "its Cluster has no control-plane Machine left"
    return None


async def reconcile_delete(scope: Scope) -> Result:
    """Upstream's deletion sequence: pre-drain hooks, drain and volume detach (only while
    the Node may be touched), pre-terminate hooks, the infra machine, then the Node."""
    machine = scope.machine
    if deleted_for_move(machine.raw):
        # clusterctl move deletes the source copy; the Machine lives on in the target
        # cluster, so its Node is neither drained nor deleted, nor its infra machine.
        _drop_finalizer(machine)
        _deleting(scope, c.DELETION_COMPLETED_REASON, "moved by clusterctl")
        return Result()
    wclient = await scope.env.cluster_cache.get_client(scope.cluster_key)
    why = await _node_left_alone(scope)
    node_allowed = why is None
    if why is not None and scope.node is not None:
        log.info(
            f"leaving the Node of a deleted Machine alone: {why}",
            node=str(NodeView(scope.node).metadata.name),
            machine=str(scope.key),
        )
    if node_allowed:
        if _waiting_for_hooks(scope, PRE_DRAIN):
            return Result()
        if scope.node is not None and _drain_allowed(machine, scope.infra_machine):
            draining = await _drain(scope, wclient, scope.node)
            if draining is not None:
                return draining
        if scope.node is not None and _volume_detach_allowed(machine, scope.infra_machine):
            detaching = await _wait_for_volumes(scope, wclient, scope.node)
            if detaching is not None:
                return detaching
    if _waiting_for_hooks(scope, PRE_TERMINATE):
        return Result()
    if scope.infra_machine is not None:
        await _delete_infra_machine(scope)
        return Result()  # the infra machine's delete event brings us back
    if scope.infra_machine_not_found:
        status.set_v1beta1_infrastructure_deleted(machine)
    if node_allowed:
        await _delete_node(scope)
    _drop_finalizer(machine)
    _deleting(scope, c.DELETION_COMPLETED_REASON, "")
    return Result()


def _infra_machine_going(infra_machine: Obj | None) -> bool:
    """The infra machine is gone or being deleted: its instance is going away with the pods
    and volumes on it, so upstream neither drains its Node nor waits for volumes there."""
    return infra_machine is None or InfraMachine(infra_machine).deleting


def _drain_allowed(machine: MachineView, infra_machine: Obj | None) -> bool:
    """Not excluded by annotation, not once the pre-terminate hooks were waited for (by
    then the drain had its turn: upstream does not go back to it), and not once the infra
    machine is gone or going."""
    if c.EXCLUDE_NODE_DRAINING_ANNOTATION in (machine.metadata.annotations or {}):
        return False
    if _infra_machine_going(infra_machine):
        return False
    return not machine.status.deletion.wait_for_pre_terminate_hook_start_time


async def _drain(scope: Scope, wclient: Client, node: Obj) -> Result | None:
    """Cordon and drain ``node`` until done or ``nodeDrainTimeoutSeconds`` passed; the
    Result to come back with while it is not, ``None`` once the deletion may go on."""
    machine = scope.machine
    deletion = machine.status.deletion
    if deletion.node_drain_start_time is None:
        deletion.node_drain_start_time = format_time(now())
    passed, left = _timed_out(
        deletion.node_drain_start_time, machine.spec.deletion.node_drain_timeout_seconds
    )
    if not passed:
        try:
            rules = drain.machine_rules(
                scope.env.drain_rules.list(scope.key.namespace),
                machine.raw,
                scope.cluster.raw,
            )
            await drain.cordon(wclient, node)
            result = await drain.drain(wclient, node, now(), rules)
        except Exception as exc:
            await _drain_failed(scope, node, exc)
            raise
        if not result.done:
            _deleting(scope, c.DRAINING_NODE_REASON, result.message())
            set_v1beta1_condition(
                machine.status.v1beta1.edit_conditions(),
                c.V1BETA1_DRAINING_SUCCEEDED_CONDITION,
                False,
                c.V1BETA1_DRAINING_REASON,
                result.message(),
                c.SEVERITY_INFO,
            )
            wait = min(DRAIN_RETRY, left, result.skippable_in or DRAIN_RETRY)
            return Result(requeue_after=max(0.5, wait))
    set_v1beta1_condition(
        machine.status.v1beta1.edit_conditions(), c.V1BETA1_DRAINING_SUCCEEDED_CONDITION, True
    )
    return None


async def _drain_failed(scope: Scope, node: Obj, exc: Exception) -> None:
    """A drain round failed (a rule it cannot apply, the workload cluster's API): say so as
    upstream does, DrainingSucceeded False DrainingFailed with the error and a Warning event;
    the reconcile fails and is retried with backoff."""
    set_v1beta1_condition(
        scope.machine.status.v1beta1.edit_conditions(),
        c.V1BETA1_DRAINING_SUCCEEDED_CONDITION,
        False,
        c.V1BETA1_DRAINING_FAILED_REASON,
        str(exc),
        c.SEVERITY_WARNING,
    )
    message = "Error draining Node, please check controller logs for errors"
    _deleting(scope, c.DRAINING_NODE_REASON, message)
    why = f"error draining Machine's node {NodeView(node).metadata.name}: {exc}"
    await scope.env.recorder.event(scope.machine.raw, "Warning", "FailedDrainNode", why)


def _volume_detach_allowed(machine: MachineView, infra_machine: Obj | None) -> bool:
    """Not excluded by annotation, not once the pre-terminate hooks were waited for, not
    once the infra machine is gone or going, and not past ``nodeVolumeDetachTimeoutSeconds``
    since the wait began."""
    annotations = machine.metadata.annotations or {}
    if c.EXCLUDE_WAIT_FOR_NODE_VOLUME_DETACH_ANNOTATION in annotations:
        return False
    if _infra_machine_going(infra_machine):
        return False
    if machine.status.deletion.wait_for_pre_terminate_hook_start_time:
        return False
    passed, _ = _timed_out(
        machine.status.deletion.wait_for_node_volume_detach_start_time,
        machine.spec.deletion.node_volume_detach_timeout_seconds,
    )
    return not passed


async def _wait_for_volumes(scope: Scope, wclient: Client, node: Obj) -> Result | None:
    """Wait while volumes are attached to the drained ``node``; the Result to come back with,
    ``None`` once none is (or the Node is unreachable: nothing detaches from a dead Node,
    and waiting would block its replacement)."""
    machine = scope.machine
    deletion = machine.status.deletion
    if deletion.wait_for_node_volume_detach_start_time is None:
        deletion.wait_for_node_volume_detach_start_time = format_time(now())
    start = deletion.wait_for_node_volume_detach_start_time
    v1beta1 = machine.status.v1beta1.edit_conditions()
    if not any(cond.get("type") == c.V1BETA1_VOLUME_DETACH_SUCCEEDED_CONDITION for cond in v1beta1):
        set_v1beta1_condition(
            v1beta1,
            c.V1BETA1_VOLUME_DETACH_SUCCEEDED_CONDITION,
            False,
            c.V1BETA1_WAITING_FOR_VOLUME_DETACH_REASON,
            "Waiting for node volumes to be detached",
            c.SEVERITY_INFO,
        )
    if not drain.node_unreachable(node):
        attached = await volumes.still_attached(wclient, node)
        if attached:
            _deleting(scope, c.WAITING_FOR_VOLUME_DETACH_REASON, attached.message(start))
            return Result(requeue_after=VOLUME_DETACH_RETRY)
    set_v1beta1_condition(v1beta1, c.V1BETA1_VOLUME_DETACH_SUCCEEDED_CONDITION, True)
    return None


async def _delete_infra_machine(scope: Scope) -> None:
    """Delete the infra machine (once) and say the deletion waits for it."""
    ref = scope.machine.spec.infrastructure_ref
    text = ref_text(str(ref.kind), scope.key.namespace, str(ref.name))
    _deleting(
        scope, c.WAITING_FOR_INFRASTRUCTURE_DELETION_REASON, f"Waiting for {text} to be deleted"
    )
    if scope.infra_machine is None or InfraMachine(scope.infra_machine).deleting:
        return
    resource = await scope.env.resolver.resolve(str(ref.api_group), str(ref.kind))
    await scope.env.client.delete(
        resource,
        str(ref.name),
        scope.key.namespace,
        uid=ObjectView(scope.infra_machine).metadata.uid,
    )


async def _delete_node(scope: Scope) -> None:
    """Delete the Node, unless ``nodeDeletionTimeoutSeconds`` since the deletion passed."""
    machine, node = scope.machine, scope.node
    passed, _ = _timed_out(
        machine.metadata.deletion_timestamp, machine.spec.deletion.node_deletion_timeout_seconds
    )
    if node is None or passed:
        return
    name = str(NodeView(node).metadata.name)
    _deleting(scope, c.DELETING_NODE_REASON, f"Deleting Node {name}")
    try:
        deleted = await scope.env.cluster_cache.delete_once(scope.cluster_key, NODES, node)
    except NotFound:
        return
    except Exception as exc:
        # As upstream says it: NodeHealthy False DeletionFailed, a Warning event; the
        # reconcile fails and is retried until nodeDeletionTimeoutSeconds lets the Node be.
        set_v1beta1_condition(
            machine.status.v1beta1.edit_conditions(),
            c.V1BETA1_NODE_HEALTHY_CONDITION,
            False,
            c.V1BETA1_DELETION_FAILED_REASON,
            "",
            c.SEVERITY_WARNING,
        )
        message = "Error deleting Node, please check controller logs for errors"
        _deleting(scope, c.DELETING_NODE_REASON, message)
        why = f"error deleting Machine's Node: {exc}"
        await scope.env.recorder.event(machine.raw, "Warning", "FailedDeleteNode", why)
        raise
    if deleted:
        log.info("deleted the Node of a deleted Machine", node=name, machine=str(scope.key))


def _drop_finalizer(machine: MachineView) -> None:
    machine.metadata.finalizers = [
        f for f in machine.metadata.finalizers or [] if f != c.MACHINE_FINALIZER
    ]


NORMAL_PHASES: tuple[Phase[Scope], ...] = (observe, report_v1beta1, reconcile_normal)
DELETE_PHASES: tuple[Phase[Scope], ...] = (observe, report_v1beta1, reconcile_delete)
