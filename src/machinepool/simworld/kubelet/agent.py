"""The node simulator's controller: one reconcile per simulated instance.

For a running instance it joins the workload cluster with the bootstrap data the instance
booted with (``join.py``), registers the Node under the name its JoinConfiguration gives (the
instance's hostname unless ``nodeRegistration.name`` says otherwise), heartbeats Ready, and
runs the pods bound to it: pending pods are reported Running and pods being deleted (evicted,
drained) are let go, so drains and PodDisruptionBudgets behave as with a real kubelet. Like
kubelet, it also keeps the Node's Lease in ``kube-node-lease`` (created when missing, owned by
the Node) renewed every ``lease_renew_seconds``.

A failed instance's Node turns NotReady; a terminated (or vanished) instance's Node is
deleted ``node_deletion_grace_seconds`` after the simulator saw the instance end, as a cloud
node lifecycle controller would, except when ``clusterctl move`` took the record away (it
marks what it deletes): the instance runs on, tracked by the target management cluster. The
grace leaves a Machine's Node to Cluster API, which deletes it right after the infra machine
(and with it the instance) is gone; the simulator deleting it at once as well made two
DELETEs of one Node, one answered 404, for about half the Nodes a rollout replaced.

An instance whose kubelet was stopped (``SimCloud.stop_kubelet``) neither joins, heartbeats
nor renews its Lease; once the later of its last heartbeat and its Lease's renewal
is older than the node monitor grace period, its Node's conditions turn Unknown, as
kube-controller-manager's node lifecycle controller would write them (the local workload
clusters run that controller only when started with ``controlplane.PodLifecycle``; with it, a
grace period longer than the controller's leaves the verdict to the real one). Wired by
``machinepool.simworld.kubelet.setup``.

With ``tls_bootstrap`` (``KubeletOptions.kubelet_tls_bootstrap``) each instance's kubelet
writes with a client certificate of its own instead of the cluster's admin client: at join it
trades its bootstrap token for a certificate for ``system:node:<name>`` through a
CertificateSigningRequest (``join.request_client_certificate``), and its Node create, status
heartbeats, Lease renewals and its pods' status writes and deletions go through that client,
so a workload cluster with the Node authorizer and NodeRestriction (``controlplane.NodeAuth``)
lets it write only itself. Certificates are held in memory by instance; after a restart of
the simulator a running instance bootstraps again with its token. When the token is no
longer valid, its kubelet stays silent (no heartbeat nor Lease renewal), as a real kubelet
that lost its certificate would, until a node lifecycle controller judges its Node. What the
simulator does for the cloud and the control plane (the Node of a failed or terminated
instance, a stopped kubelet's Unknown verdict) stays with the admin client.

A Node is found again by its spec.providerID (an index of the workload Node informer), never by
a name made from the instance: its name came from the bootstrap data at join, and a name held
by another instance's Node is not taken over (that instance does not join, and says why).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from machinepool.api.meta import deleted_for_move
from machinepool.runtime import (
    LEASES,
    NODES,
    PODS,
    SECRETS,
    AlreadyExists,
    Client,
    ClusterCache,
    ClusterNotConnected,
    Controller,
    FuncHandler,
    Informer,
    NotFound,
    Obj,
    ObjectKey,
    PatchType,
    Result,
    field_indexer,
    get_logger,
)
from machinepool.simworld.instances import InstanceEvents, Instances
from machinepool.simworld.kubelet.join import (
    JoinRejected,
    NodeCertificate,
    TokenClients,
    request_client_certificate,
    verify_join,
)
from machinepool.simworld.kubelet.joinconfig import InvalidBootstrapData, parse_join
from machinepool.simworld.kubelet.node import (
    NODE_LEASE_NAMESPACE,
    lease_age,
    node_lease,
    node_lease_renewal,
    node_object,
    node_status,
    node_unknown_status,
    pod_running_status,
    pod_stopped_status,
    pod_stops_at,
)
from machinepool.simworld.records import InstanceRecord, record_in, user_data

__all__ = ["KubeletSimulator"]

NODE_NAME_INDEX = "kubelet-sim.nodeName"
"""Index of the workload Pod informer: spec.nodeName."""
PROVIDER_ID_INDEX = "kubelet-sim.providerID"
"""Index of the workload Node informer: spec.providerID, how an instance finds its Node."""
log = get_logger(__name__)


@dataclass(frozen=True)
class _Identity:
    """A kubelet's own credentials (``tls_bootstrap``): the certificate of Node ``name`` and
    the client built from it."""

    name: str
    certificate: NodeCertificate
    client: Client


class KubeletSimulator:
    """Reconciles instances (of launch Secrets) into Nodes and pod status in workload
    clusters; its reconcile key is the instance (namespace and id)."""

    def __init__(
        self,
        client: Any,
        instances: Instances,
        cluster_cache: ClusterCache,
        *,
        heartbeat_seconds: float = 30.0,
        retry_seconds: float = 5.0,
        node_monitor_grace_seconds: float = 50.0,
        node_deletion_grace_seconds: float = 5.0,
        lease_renew_seconds: float = 10.0,
        lease_duration_seconds: int = 40,
        tls_bootstrap: bool = False,
    ) -> None:
        """``lease_renew_seconds`` 0: no Node Leases (every other setting as
        ``KubeletOptions`` says)."""
        self.client = client
        self.instances = instances
        self.cluster_cache = cluster_cache
        self.heartbeat = heartbeat_seconds
        self.retry = retry_seconds
        self.grace = node_monitor_grace_seconds
        self.node_deletion_grace = node_deletion_grace_seconds
        self.lease_renew = lease_renew_seconds
        self.lease_duration = lease_duration_seconds
        self.tls_bootstrap = tls_bootstrap
        self._token_clients = TokenClients()
        """Bootstrap-token clients, one per token, shared by the nodes joining with it."""
        self._identities: dict[ObjectKey, _Identity] = {}
        """Each instance's kubelet credentials (``tls_bootstrap``), in memory only."""
        self._renewed: dict[ObjectKey, datetime] = {}
        """When this process last renewed each instance's Node Lease (none after a restart:
        the first look renews, as a restarted kubelet does)."""
        self.controller: Controller | None = None
        self._gone: dict[ObjectKey, InstanceRecord] = {}
        self._ended: dict[ObjectKey, datetime] = {}
        """When this process first saw each instance terminated or its record gone."""
        self._unjoined: set[ObjectKey] = set()
        self._replaying = False
        self._node_keys: dict[str, ObjectKey] = {}
        """Instance record by the name of its Node, for pod events (pods name their Node)."""
        self._pod_watches: set[ObjectKey] = set()

    def follow_records(self) -> None:
        """Subscribe to the records informer, instance by instance (``InstanceEvents``):
        births (``remember_new``) and deaths (``remember_deleted``)."""
        self._replaying = True  # add_handler replays what the informer holds: not births
        try:
            self.instances.informer.add_handler(
                InstanceEvents(FuncHandler(add=self.remember_new, delete=self.remember_deleted))
            )
        finally:
            self._replaying = False

    def remember_new(self, instance: Obj) -> None:
        """Note an instance launched while this simulator runs: until it joins the instance,
        no Node of it can have existed, so that join may trust the informer's copy (instances
        from before, or from while another replica led, are re-read before joining)."""
        running = self.controller is not None and self.controller.running
        if running and self.instances.informer.has_synced and not self._replaying:
            self._unjoined.add(ObjectKey.of(instance))

    def remember_deleted(self, instance: Obj) -> None:
        """Keep the record of an instance that left its launch (or whose launch was deleted),
        so its reconcile can still find (and delete) the Node; an instance moved to another
        management cluster is forgotten instead."""
        key = ObjectKey.of(instance)
        self._unjoined.discard(key)
        if deleted_for_move(instance):
            log.info("instance record moved away; its Node stays", instance=key.name)
            return
        record = record_in(instance["launch"], key.name)
        if record is not None:
            self._gone[key] = record

    async def reconcile(self, key: ObjectKey) -> Result | None:
        secret = self.instances.launch_of(key.namespace, key.name)
        record = self.instances.decode(secret).get(key.name) if secret is not None else None
        now = datetime.now(UTC)
        if secret is None or record is None:
            self._renewed.pop(key, None)
            await self._forget_identity(key)
            gone = self._gone.get(key)
            if gone is None:
                self._ended.pop(key, None)
                return None
            return await self._delete_node_after_grace(gone, now)
        if not record.cluster:
            return None
        state = record.state_at(now)
        if state == "pending":
            wait = (record.running_at - now).total_seconds()
            return Result(requeue_after=max(0.2, wait + 0.05))
        if state == "stopped":
            # A warm-pool instance, booted and stopped: no kubelet runs, so no Node; its
            # start changes the record, and that brings it back here.
            return None
        try:
            return await self._converge(record, secret, state, now)
        except ClusterNotConnected as exc:
            log.info("workload cluster not reachable", instance=record.id, error=str(exc))
            return Result(requeue_after=self.retry)

    async def _converge(
        self, record: InstanceRecord, secret: Obj, state: str, now: datetime
    ) -> Result | None:
        cluster = ObjectKey(record.namespace, record.cluster)
        node = node_of(await self.cluster_cache.get_informer(cluster, NODES), record)
        if state == "terminated":
            self._renewed.pop(ObjectKey(record.namespace, record.id), None)
            await self._forget_identity(ObjectKey(record.namespace, record.id))
            return await self._delete_node_after_grace(record, now)
        if state == "failed":  # a broken machine: its kubelet renews nothing any more
            if node is not None and _ready(node):
                await self._post_status(
                    record, _name(node), ready=False, now=now, reason="InstanceFailed", node=node
                )
            return None
        if record.kubelet_stopped:
            return await self._silent(record, node, now)
        if node is None:
            return await self._join(record, secret, now)
        name = _name(node)
        key = ObjectKey(record.namespace, record.id)
        self._node_keys[name] = key
        self._unjoined.discard(key)
        try:
            kubelet = await self._kubelet_client(record, secret, name)
        except (InvalidBootstrapData, JoinRejected) as exc:
            log.warning("kubelet has no credentials", instance=record.id, reason=str(exc))
            return Result(requeue_after=self.retry)
        if _needs_heartbeat(node, now, self.heartbeat):
            await self._post_status(record, name, ready=True, now=now, client=kubelet, node=node)
        await self._renew_lease(record, node, now, kubelet)
        next_stop = await self._run_pods(cluster, name, now, kubelet)
        look = self._next_look(record, now)
        return Result(requeue_after=look if next_stop is None else min(look, next_stop + 0.05))

    def _next_look(self, record: InstanceRecord, now: datetime) -> float:
        """The next heartbeat or Lease renewal, or the moment the instance breaks if that
        comes first."""
        period = min(self.heartbeat, self.lease_renew) if self.lease_renew > 0 else self.heartbeat
        if record.fail_at is None:
            return period
        return min(period, max(0.05, (record.fail_at - now).total_seconds() + 0.05))

    async def _renew_lease(
        self, record: InstanceRecord, node: Obj, now: datetime, client: Client
    ) -> None:
        """Renew the Node's Lease when a period has passed since this process last did: one
        merge patch (kubelet sends an update), or a create when it has none (a new Node, or
        one whose Lease went with an earlier Node of the same name)."""
        key = ObjectKey(record.namespace, record.id)
        last = self._renewed.get(key)
        if self.lease_renew <= 0 or (
            last is not None and (now - last).total_seconds() < self.lease_renew * 0.8
        ):
            return
        name = _name(node)
        renewal = node_lease_renewal(name, now, self.lease_duration)
        try:
            await client.patch(LEASES, name, renewal, NODE_LEASE_NAMESPACE)
        except NotFound:
            with contextlib.suppress(AlreadyExists):  # created meanwhile: renewed next time
                lease = node_lease(node, now, self.lease_duration)
                await client.create(LEASES, lease, NODE_LEASE_NAMESPACE)
        self._renewed[key] = now

    async def _lease_age(self, record: InstanceRecord, node: Obj, now: datetime) -> float:
        """Seconds since the Node's Lease was renewed, read fresh (a silent kubelet is looked
        at twice: when it stops and when its grace period ends); infinite without one."""
        if self.lease_renew <= 0:
            return float("inf")
        client = await self.cluster_cache.get_client(ObjectKey(record.namespace, record.cluster))
        try:
            lease = await client.get(LEASES, _name(node), NODE_LEASE_NAMESPACE)
        except NotFound:
            return float("inf")
        return lease_age(lease, now)

    async def _silent(
        self, record: InstanceRecord, node: Obj | None, now: datetime
    ) -> Result | None:
        """A dead kubelet: nothing is posted until the grace period passed, then the node
        monitor's verdict (every condition Unknown), once."""
        if node is None:
            return None  # never joins; a change of the record brings us back
        age = min(_heartbeat_age(node, now), await self._lease_age(record, node, now))
        if age < self.grace:
            return Result(requeue_after=self.grace - age + 0.1)
        if _ready_status(node) != "Unknown":
            client = await self.cluster_cache.get_client(
                ObjectKey(record.namespace, record.cluster)
            )
            with contextlib.suppress(NotFound):
                await client.patch(
                    NODES, _name(node), node_unknown_status(node, now), subresource="status"
                )
        return None

    async def _join(self, record: InstanceRecord, secret: Obj, now: datetime) -> Result | None:
        cluster = ObjectKey(record.namespace, record.cluster)
        key = ObjectKey(record.namespace, record.id)
        if key not in self._unjoined:
            # Its Node may have existed: re-read the record, so a stale cache cannot resurrect
            # a Node that was just removed.
            try:
                secret = await self.client.get(SECRETS, record.launch, record.namespace)
            except NotFound:
                return None
            fresh = record_in(secret, record.id)
            if fresh is None:
                return None
            record = fresh
            if record.state_at(now) != "running":
                return Result(requeue_after=0.2)
        try:
            join = parse_join(user_data(secret, record))
            name = join.node_name(record.hostname, record.meta_data())
            await verify_join(join, await self._admin_kubeconfig(cluster), self._token_clients)
            kubelet = await self._kubelet_client(record, secret, name)
        except (InvalidBootstrapData, JoinRejected) as exc:
            log.warning("instance cannot join", instance=record.id, reason=str(exc))
            return Result(requeue_after=self.retry)
        # Registered with its status, as kubelet does (it sets the status before creating
        # its Node): one write per joining Node instead of a create and a status patch.
        body = {
            **node_object(record, name, list(join.taints), join.node_labels),
            **node_status(record, name, ready=True, now=now),
        }
        try:
            created: Obj | None = await kubelet.create(NODES, body)
        except AlreadyExists:
            created = None
            taken = await _holder(await self.cluster_cache.get_client(cluster), name)
            if taken is not None and taken != record.provider_id:
                log.warning(
                    "instance cannot join: its Node name belongs to another instance's Node",
                    instance=record.id,
                    node=name,
                    holder=taken,
                )
                return Result(requeue_after=self.retry)
        self._unjoined.discard(key)
        self._node_keys[name] = key
        if created is None or not _ready(created):
            await self._post_status(record, name, ready=True, now=now, client=kubelet, node=created)
        if created is not None:  # else the next look renews, with the Node from the cache
            await self._renew_lease(record, created, now, kubelet)
        await self._watch_pods(cluster)
        log.info(
            "node joined",
            node=name,
            instance=record.id,
            cluster=str(cluster),
            token_id=join.token_id,
        )
        return Result(requeue_after=self._next_look(record, now))

    async def _admin_kubeconfig(self, cluster: ObjectKey) -> dict[str, Any]:
        """The cluster's address and CA, as the cluster cache connected with them: a kubelet
        finds them in its bootstrap data; the simulator takes them from the kubeconfig
        Secret, read once per connection rather than once per joining Node."""
        return await self.cluster_cache.get_kubeconfig(cluster)

    async def _kubelet_client(self, record: InstanceRecord, secret: Obj, name: str) -> Client:
        """The client the instance's kubelet writes with: the cluster's admin client, or with
        ``tls_bootstrap`` one with its own certificate, bootstrapped with its token when it
        holds none for Node ``name`` (raises ``JoinRejected`` or ``InvalidBootstrapData``)."""
        cluster = ObjectKey(record.namespace, record.cluster)
        if not self.tls_bootstrap:
            return await self.cluster_cache.get_client(cluster)
        key = ObjectKey(record.namespace, record.id)
        held = self._identities.get(key)
        if held is not None and held.name == name:
            return held.client
        join = parse_join(user_data(secret, record))
        cert = await request_client_certificate(
            join, await self._admin_kubeconfig(cluster), name, clients=self._token_clients
        )
        await self._forget_identity(key)
        identity = _Identity(name, cert, cert.client())
        self._identities[key] = identity
        log.info("kubelet client certificate issued", node=name, instance=record.id, csr=cert.csr)
        return identity.client

    def node_certificate(self, node_name: str) -> NodeCertificate | None:
        """The client certificate the kubelet of Node ``node_name`` holds (``tls_bootstrap``),
        for tests and tools that act as that node."""
        for identity in self._identities.values():
            if identity.name == node_name:
                return identity.certificate
        return None

    async def _forget_identity(self, key: ObjectKey) -> None:
        identity = self._identities.pop(key, None)
        if identity is not None:
            await identity.client.close()

    async def close(self) -> None:
        """Close every kubelet's own client and the token clients (after the controller
        stopped)."""
        for key in list(self._identities):
            await self._forget_identity(key)
        await self._token_clients.close()

    async def _post_status(
        self,
        record: InstanceRecord,
        name: str,
        *,
        ready: bool,
        now: datetime,
        reason: str = "",
        client: Client | None = None,
        node: Obj | None = None,
    ) -> None:
        """Patch Node ``name``'s status with ``client`` (the kubelet's), else the admin's;
        ``node``, the Node as last seen, keeps the transition times of unchanged conditions."""
        if client is None:
            client = await self.cluster_cache.get_client(
                ObjectKey(record.namespace, record.cluster)
            )
        status = node_status(record, name, ready, now, reason, current=node)
        with contextlib.suppress(NotFound):
            await client.patch(NODES, name, status, subresource="status")

    async def _delete_node_after_grace(
        self, record: InstanceRecord, now: datetime
    ) -> Result | None:
        """Delete the Node of an ended instance once ``node_deletion_grace`` has passed since
        this process saw it end (a restarted simulator counts from its restart)."""
        key = ObjectKey(record.namespace, record.id)
        ended = self._ended.setdefault(key, now)
        left = self.node_deletion_grace - (now - ended).total_seconds()
        if left > 0:
            return Result(requeue_after=left + 0.05)
        self._gone.pop(key, None)
        self._ended.pop(key, None)
        await self._delete_node(record)
        return None

    async def _delete_node(self, record: InstanceRecord) -> None:
        cluster = ObjectKey(record.namespace, record.cluster)
        try:
            nodes = await self.cluster_cache.get_informer(cluster, NODES)
            node = node_of(nodes, record)
            if node is None:
                return
            name = _name(node)
            self._node_keys.pop(name, None)
            if await self.cluster_cache.delete_once(cluster, NODES, node):
                log.info(
                    "deleted the Node of a terminated instance",
                    node=name,
                    instance=record.id,
                    cluster=str(cluster),
                )
        except ClusterNotConnected:
            return  # the cluster is gone, and its Nodes with it

    # -- pods -----------------------------------------------------------------------------

    async def _watch_pods(self, cluster: ObjectKey) -> None:
        if cluster in self._pod_watches or self.controller is None:
            return
        informer = await self.cluster_cache.watch(
            cluster, PODS, self.controller.handler(self._pod_to_record)
        )
        with contextlib.suppress(ValueError):
            informer.add_indexer(NODE_NAME_INDEX, field_indexer("spec.nodeName"))
        self._pod_watches.add(cluster)

    def _pod_to_record(self, pod: Obj) -> list[ObjectKey]:
        key = self._node_keys.get(str((pod.get("spec") or {}).get("nodeName") or ""))
        return [key] if key is not None else []

    async def _run_pods(
        self, cluster: ObjectKey, node_name: str, now: datetime, client: Client
    ) -> float | None:
        """Start pending pods and end deleted ones, writing with ``client`` (the kubelet's);
        returns the seconds until the next container stops (``None`` when none is stopping)."""
        await self._watch_pods(cluster)
        pods = await self.cluster_cache.get_informer(cluster, PODS)
        next_stop: float | None = None
        for pod in pods.by_index(NODE_NAME_INDEX, node_name):
            meta = pod["metadata"]
            stopping = pod_stops_at(pod)
            if stopping is not None:
                stops_at, killed = stopping
                wait = (stops_at - now).total_seconds()
                if wait > 0:  # still in its grace period, on its way out
                    next_stop = wait if next_stop is None else min(next_stop, wait)
                    continue
                await self._end_pod(client, pod, now, killed)
            elif (pod.get("status") or {}).get("phase") in (None, "Pending"):
                with contextlib.suppress(NotFound):
                    await client.patch(
                        PODS,
                        meta["name"],
                        pod_running_status(pod, now),
                        meta["namespace"],
                        subresource="status",
                    )
        return next_stop

    async def _end_pod(self, client: Any, pod: Obj, now: datetime, killed: bool) -> None:
        """Its containers are gone: report the terminal status (once), then confirm the
        deletion with grace 0, as a kubelet does. A finalizer keeps the object after that
        until its owner removes it; the simulator only confirms again."""
        meta = pod["metadata"]
        with contextlib.suppress(NotFound):
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                await client.patch(
                    PODS,
                    meta["name"],
                    pod_stopped_status(pod, now, killed),
                    meta["namespace"],
                    patch_type=PatchType.STRATEGIC,
                    subresource="status",
                )
            if meta.get("deletionGracePeriodSeconds") != 0:
                await client.delete(
                    PODS,
                    meta["name"],
                    meta["namespace"],
                    uid=meta.get("uid"),
                    grace_period_seconds=0,
                )


def node_of(nodes: Informer, record: InstanceRecord) -> Obj | None:
    """``record``'s Node in the workload Node informer ``nodes``: the one with its providerID."""
    try:
        found = nodes.by_index(PROVIDER_ID_INDEX, record.provider_id)
    except KeyError:  # a new informer (first look, or rebuilt after a kubeconfig change)
        with contextlib.suppress(ValueError):
            nodes.add_indexer(PROVIDER_ID_INDEX, field_indexer("spec.providerID"))
        found = nodes.by_index(PROVIDER_ID_INDEX, record.provider_id)
    return found[0] if found else None


async def _holder(client: Any, name: str) -> str | None:
    """The providerID of the Node ``name`` (None when it is gone), read fresh: a create that
    found the name taken must know whose Node holds it before treating it as its own."""
    try:
        node = await client.get(NODES, name)
    except NotFound:
        return None
    return str((node.get("spec") or {}).get("providerID") or "")


def _name(node: Obj) -> str:
    return str(node["metadata"]["name"])


def _ready(node: Obj) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _ready_status(node: Obj) -> str:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status"))
    return ""


def _heartbeat_age(node: Obj, now: datetime) -> float:
    """Seconds since the Ready heartbeat (infinite when there is none)."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("lastHeartbeatTime"):
            beat = datetime.fromisoformat(str(cond["lastHeartbeatTime"]).replace("Z", "+00:00"))
            return (now - beat).total_seconds()
    return float("inf")


def _needs_heartbeat(node: Obj, now: datetime, interval: float) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            if cond.get("status") != "True":
                return True
            beat = cond.get("lastHeartbeatTime")
            if not beat:
                return True
            age = (now - datetime.fromisoformat(str(beat).replace("Z", "+00:00"))).total_seconds()
            return age >= interval * 0.8
    return True
