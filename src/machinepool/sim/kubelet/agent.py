"""The node simulator's controller: one reconcile per simulated instance.

For a running instance it joins the workload cluster with the bootstrap data the instance
booted with (``join.py``), registers the Node, heartbeats Ready, and runs the pods bound to it:
pending pods are reported Running and pods being deleted (evicted, drained) are let go, so
drains and PodDisruptionBudgets behave as with a real kubelet. A failed instance's Node turns
NotReady; a terminated (or vanished) instance's Node is deleted, as a cloud node lifecycle
controller would, except when ``clusterctl move`` took the record away (it marks what it
deletes): the instance runs on, tracked by the target management cluster. An instance whose
kubelet was stopped (``SimCloud.stop_kubelet``) neither joins nor heartbeats; once its last
heartbeat is older than the node monitor grace period its Node's conditions turn Unknown, as
kube-controller-manager's node lifecycle controller (which the local workload clusters do not
run) would write them. Wired by
``machinepool.sim.kubelet.setup``.
"""

from __future__ import annotations

import base64
import contextlib
from datetime import UTC, datetime
from typing import Any

from machinepool.api.meta import deleted_for_move
from machinepool.runtime import (
    NODES,
    PODS,
    SECRETS,
    AlreadyExists,
    ClusterCache,
    ClusterNotConnected,
    Controller,
    FuncHandler,
    Informer,
    NotFound,
    Obj,
    ObjectKey,
    Result,
    field_indexer,
    get_logger,
)
from machinepool.sim.kubelet.join import JoinRejected, verify_join
from machinepool.sim.kubelet.joinconfig import InvalidBootstrapData, load_yaml, parse_join
from machinepool.sim.kubelet.node import (
    node_object,
    node_status,
    node_unknown_status,
    pod_running_status,
)
from machinepool.sim.records import InstanceRecord, user_data

__all__ = ["KubeletSimulator"]

NODE_NAME_INDEX = "kubelet-sim.nodeName"
log = get_logger(__name__)


class KubeletSimulator:
    """Reconciles instance records (Secrets) into Nodes and pod status in workload clusters."""

    def __init__(
        self,
        client: Any,
        records: Informer,
        cluster_cache: ClusterCache,
        *,
        heartbeat_seconds: float = 30.0,
        retry_seconds: float = 5.0,
        node_monitor_grace_seconds: float = 50.0,
    ) -> None:
        self.client = client
        self.records = records
        self.cluster_cache = cluster_cache
        self.heartbeat = heartbeat_seconds
        self.retry = retry_seconds
        self.grace = node_monitor_grace_seconds
        self.controller: Controller | None = None
        self._gone: dict[ObjectKey, InstanceRecord] = {}
        self._unjoined: set[ObjectKey] = set()
        self._replaying = False
        self._node_keys: dict[str, ObjectKey] = {}
        self._pod_watches: set[ObjectKey] = set()

    def follow_records(self) -> None:
        """Subscribe to the records informer: births (``remember_new``) and deaths
        (``remember_deleted``)."""
        self._replaying = True  # add_handler replays what the informer holds: not births
        try:
            self.records.add_handler(
                FuncHandler(add=self.remember_new, delete=self.remember_deleted)
            )
        finally:
            self._replaying = False

    def remember_new(self, secret: Obj) -> None:
        """Note a record created while this simulator runs: until it joins the instance, no
        Node of it can have existed, so that join may trust the informer's copy (records from
        before, or from while another replica led, are re-read before joining)."""
        running = self.controller is not None and self.controller.running
        if running and self.records.has_synced and not self._replaying:
            self._unjoined.add(ObjectKey.of(secret))

    def remember_deleted(self, secret: Obj) -> None:
        """Keep a deleted record so its reconcile can still find (and delete) the Node;
        a record moved to another management cluster is forgotten instead."""
        record = InstanceRecord.from_secret(secret)
        key = ObjectKey(record.namespace, record.id)
        self._unjoined.discard(key)
        if deleted_for_move(secret):
            log.info("instance record moved away; its Node stays", instance=record.id)
            return
        self._gone[key] = record

    async def reconcile(self, key: ObjectKey) -> Result | None:
        secret = self.records.get_key(key)
        if secret is None:
            gone = self._gone.pop(key, None)
            if gone is not None:
                await self._delete_node(gone)
            return None
        record = InstanceRecord.from_secret(secret)
        if not record.cluster:
            return None
        self._node_keys[record.id] = key
        now = datetime.now(UTC)
        state = record.state_at(now)
        if state == "pending":
            return Result(requeue_after=max(0.2, (record.boot_at - now).total_seconds() + 0.05))
        try:
            return await self._converge(record, secret, state, now)
        except ClusterNotConnected as exc:
            log.info("workload cluster not reachable", instance=record.id, error=str(exc))
            return Result(requeue_after=self.retry)

    async def _converge(
        self, record: InstanceRecord, secret: Obj, state: str, now: datetime
    ) -> Result | None:
        cluster = ObjectKey(record.namespace, record.cluster)
        nodes = await self.cluster_cache.get_informer(cluster, NODES)
        node = nodes.get(record.id)
        if state == "terminated":
            await self._delete_node(record)
            return None
        if state == "failed":
            if node is not None and _ready(node):
                await self._post_status(record, ready=False, now=now, reason="InstanceFailed")
            return None
        if record.kubelet_stopped:
            return await self._silent(record, node, now)
        if node is None:
            return await self._join(record, secret, now)
        self._unjoined.discard(ObjectKey(record.namespace, record.id))
        if _needs_heartbeat(node, now, self.heartbeat):
            await self._post_status(record, ready=True, now=now)
        await self._run_pods(cluster, record.id, now)
        return Result(requeue_after=self._next_look(record, now))

    def _next_look(self, record: InstanceRecord, now: datetime) -> float:
        """The next heartbeat, or the moment the instance breaks if that comes first."""
        if record.fail_at is None:
            return self.heartbeat
        return min(self.heartbeat, max(0.05, (record.fail_at - now).total_seconds() + 0.05))

    async def _silent(
        self, record: InstanceRecord, node: Obj | None, now: datetime
    ) -> Result | None:
        """A dead kubelet: nothing is posted until the grace period passed, then the node
        monitor's verdict (every condition Unknown), once."""
        if node is None:
            return None  # never joins; a change of the record brings us back
        age = _heartbeat_age(node, now)
        if age < self.grace:
            return Result(requeue_after=self.grace - age + 0.1)
        if _ready_status(node) != "Unknown":
            client = await self.cluster_cache.get_client(
                ObjectKey(record.namespace, record.cluster)
            )
            with contextlib.suppress(NotFound):
                await client.patch(
                    NODES, record.id, node_unknown_status(node, now), subresource="status"
                )
        return None

    async def _join(self, record: InstanceRecord, secret: Obj, now: datetime) -> Result | None:
        cluster = ObjectKey(record.namespace, record.cluster)
        key = ObjectKey(record.namespace, record.id)
        if key not in self._unjoined:
            # Its Node may have existed: re-read the record, so a stale cache cannot resurrect
            # a Node that was just removed.
            try:
                secret = await self.client.get(SECRETS, record.id, record.namespace)
            except NotFound:
                return None
            record = InstanceRecord.from_secret(secret)
            if record.state_at(now) != "running":
                return Result(requeue_after=0.2)
        try:
            join = parse_join(user_data(secret))
            await verify_join(join, await self._admin_kubeconfig(cluster))
        except (InvalidBootstrapData, JoinRejected) as exc:
            log.warning("instance cannot join", instance=record.id, reason=str(exc))
            return Result(requeue_after=self.retry)
        client = await self.cluster_cache.get_client(cluster)
        # Registered with its status, as kubelet does (it sets the status before creating
        # its Node): one write per joining Node instead of a create and a status patch.
        body = {
            **node_object(record, list(join.taints), join.node_labels),
            **node_status(record, ready=True, now=now),
        }
        try:
            created: Obj | None = await client.create(NODES, body)
        except AlreadyExists:
            created = None
        self._unjoined.discard(key)
        if created is None or not _ready(created):
            await self._post_status(record, ready=True, now=now)
        await self._watch_pods(cluster)
        log.info("node joined", node=record.id, cluster=str(cluster), token_id=join.token_id)
        return Result(requeue_after=self._next_look(record, now))

    async def _admin_kubeconfig(self, cluster: ObjectKey) -> dict[str, Any]:
        secret = await self.client.get(SECRETS, f"{cluster.name}-kubeconfig", cluster.namespace)
        raw = base64.b64decode((secret.get("data") or {}).get("value", ""))
        loaded: dict[str, Any] = load_yaml(raw)
        return loaded

    async def _post_status(
        self, record: InstanceRecord, *, ready: bool, now: datetime, reason: str = ""
    ) -> None:
        client = await self.cluster_cache.get_client(ObjectKey(record.namespace, record.cluster))
        status = node_status(record, ready, now, reason)
        with contextlib.suppress(NotFound):
            await client.patch(NODES, record.id, status, subresource="status")

    async def _delete_node(self, record: InstanceRecord) -> None:
        cluster = ObjectKey(record.namespace, record.cluster)
        self._node_keys.pop(record.id, None)
        try:
            client = await self.cluster_cache.get_client(cluster)
            nodes = await self.cluster_cache.get_informer(cluster, NODES)
        except ClusterNotConnected:
            return  # the cluster is gone, and its Nodes with it
        node = nodes.get(record.id)
        if node is None or (node.get("spec") or {}).get("providerID") != record.provider_id:
            return
        log.info("deleting the Node of a terminated instance", node=record.id, cluster=str(cluster))
        await client.delete(NODES, record.id, uid=node["metadata"].get("uid"))

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

    async def _run_pods(self, cluster: ObjectKey, node_name: str, now: datetime) -> None:
        await self._watch_pods(cluster)
        pods = await self.cluster_cache.get_informer(cluster, PODS)
        client = await self.cluster_cache.get_client(cluster)
        for pod in pods.by_index(NODE_NAME_INDEX, node_name):
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                # Containers "stopped": confirm the deletion, as a kubelet does.
                await client.delete(
                    PODS,
                    meta["name"],
                    meta["namespace"],
                    uid=meta.get("uid"),
                    grace_period_seconds=0,
                )
            elif (pod.get("status") or {}).get("phase") in (None, "Pending"):
                with contextlib.suppress(NotFound):
                    await client.patch(
                        PODS,
                        meta["name"],
                        pod_running_status(pod, now),
                        meta["namespace"],
                        subresource="status",
                    )


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
