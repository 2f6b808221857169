"""A cache of connections to workload clusters: one Client and informer set per Cluster.

Controllers that touch a workload cluster (Node matching, Node deletion, bootstrap tokens)
ask ``await cache.get_client(cluster_key)`` or ``await cache.get_informer(cluster_key,
NODES)`` instead of building clients themselves. The connection is made on first use from the
``<cluster>-kubeconfig`` Secret (data key ``value``: kubeconfig YAML) in the Cluster's
namespace, as Cluster API writes it.

Each connected cluster gets a probe task that, every ``probe_interval`` seconds:

- re-reads the kubeconfig Secret: a new ``resourceVersion`` with different content rebuilds
  the client and informers (handlers registered with ``watch`` move to the new informers);
- drops the connection when the Secret or the Cluster object is gone;
- calls ``GET /version`` on the workload API server; after ``failure_threshold`` consecutive
  failures the cluster is unhealthy and ``get_client`` raises ``ClusterUnhealthy`` saying why,
  until a probe succeeds again.

Workload events reach management-side reconciles through ``watch``: pass a controller's
``handler(mapper)`` whose mapper turns, say, a Node into its MachinePool's key.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from machinepool.api.kinds import CLUSTERS
from machinepool.runtime.kube.client import SECRETS, Client, Obj, Resource, copy_obj
from machinepool.runtime.kube.errors import ExpectedError, NotFound
from machinepool.runtime.kube.informer import (
    EventHandler,
    Informer,
    InformerCache,
    Transform,
    strip_managed_fields,
)
from machinepool.runtime.kube.keys import ObjectKey
from machinepool.runtime.kube.yamlio import load_yaml
from machinepool.runtime.telemetry.logging import KVLogger, get_logger
from machinepool.runtime.telemetry.metrics import RuntimeMetrics


class ClusterNotConnected(ExpectedError):
    """No connection to a workload cluster could be made (Secret missing, bad kubeconfig,
    API server unreachable)."""


class ClusterUnhealthy(ClusterNotConnected):
    """The workload cluster is connected but failed its recent health probes."""


@dataclass(frozen=True)
class _Watch:
    resource: Resource
    namespace: str | None
    handler: EventHandler


def _meta(obj: Obj | None, key: str) -> str:
    return str(((obj or {}).get("metadata") or {}).get(key) or "")


def _name_of(obj: Obj) -> tuple[str, str]:
    return _meta(obj, "name"), _meta(obj, "namespace")


@dataclass(frozen=True)
class _Sent:
    """A request ``ClusterCache._once`` sent for an object: its UID, the resourceVersion the
    request was made from (empty for a delete, which holds whatever the version) and the
    request itself."""

    uid: str
    version: str
    request: str

    def still(self, held: Obj | None) -> bool:
        """Whether the informer's copy ``held`` is still the one the request was made from."""
        return _meta(held, "uid") == self.uid and (
            not self.version or _meta(held, "resourceVersion") == self.version
        )


_SENT_LIMIT = 64
"""The smallest size at which a connection's memo of sent requests is swept."""


@dataclass
class _Connection:
    client: Client
    cache: InformerCache
    secret_version: str
    secret_digest: str
    kubeconfig: dict[str, Any] = field(default_factory=dict)
    failures: int = 0
    last_error: str = ""
    watches: list[_Watch] = field(default_factory=list)
    probe: asyncio.Task[None] | None = None
    sent: dict[tuple[Resource, str, str], _Sent] = field(default_factory=dict)
    """(resource, namespace, name) -> the last request ``_once`` sent for it, while the
    informer still held the object as it was."""
    sent_limit: int = _SENT_LIMIT
    """Size of ``sent`` at which it is next swept of what the informers saw change."""


def kubeconfig_secret_name(cluster_name: str) -> str:
    return f"{cluster_name}-kubeconfig"


class ClusterCache:
    """Workload-cluster clients and informers keyed by the Cluster's ``ObjectKey``.

    Options (defaults in brackets): ``probe_interval`` [10 s], ``probe_timeout`` [5 s],
    ``failure_threshold`` [3 failed probes], ``connect_backoff`` [5 s: a failed connection is
    not retried sooner; ``get_client`` re-raises the last error meanwhile], ``transform`` for
    workload informers [strip managedFields], ``metrics`` to count workload API requests.
    """

    def __init__(
        self,
        client: Client,
        *,
        probe_interval: float = 10.0,
        probe_timeout: float = 5.0,
        failure_threshold: int = 3,
        connect_backoff: float = 5.0,
        transform: Transform | None = strip_managed_fields,
        metrics: RuntimeMetrics | None = None,
        logger: KVLogger | None = None,
    ) -> None:
        self.client = client
        self.probe_interval = probe_interval
        self.probe_timeout = probe_timeout
        self.failure_threshold = failure_threshold
        self.connect_backoff = connect_backoff
        self._transform = transform
        self._metrics = metrics
        self._connections: dict[ObjectKey, _Connection] = {}
        self._failed: dict[ObjectKey, tuple[float, str]] = {}
        self._locks: dict[ObjectKey, asyncio.Lock] = {}
        self.log = (logger or get_logger(__name__)).bind(component="clustercache")

    # -- public API ---------------------------------------------------------------------

    @property
    def clusters(self) -> list[ObjectKey]:
        """Clusters currently connected."""
        return list(self._connections)

    def informer_sizes(self) -> list[tuple[str, str, str, int]]:
        """(cluster, group, kind, objects) of every workload informer: give it to
        ``RuntimeMetrics.add_informer_source`` so /metrics reports them."""
        return [
            size for key, conn in self._connections.items() for size in conn.cache.sizes(str(key))
        ]

    def is_healthy(self, cluster: ObjectKey) -> bool:
        conn = self._connections.get(cluster)
        return conn is not None and conn.failures < self.failure_threshold

    async def get_client(self, cluster: ObjectKey) -> Client:
        """The workload cluster's client, connecting on first use.

        Raises ``ClusterNotConnected`` when no connection can be made and ``ClusterUnhealthy``
        when the cluster failed its last ``failure_threshold`` probes.
        """
        conn = await self._connection(cluster)
        if conn.failures >= self.failure_threshold:
            raise ClusterUnhealthy(
                f"workload cluster {cluster} is unhealthy: {conn.failures} consecutive health"
                f" probes failed (last error: {conn.last_error})"
            )
        return conn.client

    async def get_kubeconfig(self, cluster: ObjectKey) -> dict[str, Any]:
        """A copy of the kubeconfig the workload client was built from (connecting on first
        use; rebuilt with the client when the Secret changes), for a caller that needs the
        cluster's address and CA without reading and parsing the Secret again."""
        conn = await self._connection(cluster)
        return copy_obj(conn.kubeconfig)

    async def get_informer(
        self, cluster: ObjectKey, resource: Resource, namespace: str | None = None
    ) -> Informer:
        """The shared, synced informer for ``resource`` in the workload cluster."""
        await self.get_client(cluster)
        conn = self._connections[cluster]
        return await conn.cache.get_informer(resource, namespace)

    def get_informer_nowait(
        self, cluster: ObjectKey, resource: Resource, namespace: str | None = None
    ) -> Informer | None:
        """The informer if the cluster is connected and it exists already, else ``None``."""
        conn = self._connections.get(cluster)
        return None if conn is None else conn.cache.peek(resource, namespace)

    async def delete_once(self, cluster: ObjectKey, resource: Resource, obj: Obj) -> bool:
        """Delete ``obj``, taken from the cluster's informer of ``resource``, by its UID;
        return whether a request was sent (see ``_once`` for when none is).

        Between a delete and the watch event that reports it, every reconcile still sees the
        object, and more than one acts on it: a workload Node is deleted by the Machine
        controller after its infra machine, by the MachinePool when its providerID leaves the
        list, and by the node simulator when its instance ends. Each used to send its own
        DELETE, all but the first answered 404, up to six for one Node within a fraction of
        a second (bench/RESULTS.md at fdf29f1, the convergence goals).
        """
        name, namespace = _name_of(obj)
        uid = _meta(obj, "uid")
        return await self._once(
            cluster,
            resource,
            obj,
            _Sent(uid, "", "delete"),
            lambda client: client.delete(resource, name, namespace or None, uid=uid or None),
        )

    async def patch_once(
        self, cluster: ObjectKey, resource: Resource, obj: Obj, patch: Obj
    ) -> bool:
        """Send ``patch``, made from ``obj`` as the cluster's informer of ``resource`` shows
        it; return whether a request was sent (see ``_once`` for when none is).

        Two reconciles of one Machine before the watch brings its Node's patch back both
        made the same patch from the same resourceVersion: the second, locked on that
        version, was answered 409, for about a third of the Nodes a rollout made.
        """
        name, namespace = _name_of(obj)
        request = json.dumps(patch, sort_keys=True)
        return await self._once(
            cluster,
            resource,
            obj,
            _Sent(_meta(obj, "uid"), _meta(obj, "resourceVersion"), request),
            lambda client: client.patch(resource, name, patch, namespace or None),
        )

    async def _once(
        self,
        cluster: ObjectKey,
        resource: Resource,
        obj: Obj,
        mark: _Sent,
        send: Callable[[Client], Awaitable[object]],
    ) -> bool:
        """Send a request for ``obj`` unless the informer no longer holds its UID (it is gone,
        as far as the watch tells) or this process sent the same request for it already and
        the informer has not shown a change since (for a delete: the object go)."""
        name, namespace = _name_of(obj)
        informer = await self.get_informer(cluster, resource)
        conn = self._connections[cluster]
        if len(conn.sent) >= conn.sent_limit:  # forget what the informers saw change
            for old, sent in list(conn.sent.items()):
                watched = conn.cache.peek(old[0], None)
                if watched is None or not sent.still(watched.get(old[2], old[1])):
                    del conn.sent[old]
            # Doubled each time, so a pass over the memo is paid for by the requests that
            # filled it, not repeated by each of them.
            conn.sent_limit = max(_SENT_LIMIT, 2 * len(conn.sent))
        key = (resource, namespace, name)
        held = informer.get(name, namespace)
        last = conn.sent.get(key)
        if last is not None and not last.still(held):
            del conn.sent[key]
            last = None
        if mark.uid and (_meta(held, "uid") != mark.uid or last == mark):
            return False
        if mark.uid:  # before the request: a reconcile running meanwhile must not send it too
            conn.sent[key] = mark
        try:
            await send(conn.client)
        except BaseException:
            conn.sent.pop(key, None)
            raise
        return True

    async def watch(
        self,
        cluster: ObjectKey,
        resource: Resource,
        handler: EventHandler,
        namespace: str | None = None,
    ) -> Informer:
        """Send the workload informer's events to ``handler`` (idempotent per handler).

        The registration survives a rebuild after the kubeconfig changes. Typical use maps
        Nodes back to MachinePools::

            await cache.watch(cluster, NODES, ctrl.handler(node_to_machinepool))
        """
        informer = await self.get_informer(cluster, resource, namespace)
        conn = self._connections[cluster]
        registration = _Watch(resource, namespace, handler)
        if registration not in conn.watches:
            conn.watches.append(registration)
            informer.add_handler(handler)
        return informer

    async def remove(self, cluster: ObjectKey) -> None:
        """Disconnect from ``cluster`` (its Cluster was deleted): stop informers, close client."""
        conn = self._connections.pop(cluster, None)
        self._failed.pop(cluster, None)
        if conn is None:
            return
        current = asyncio.current_task()
        if conn.probe is not None and conn.probe is not current:
            conn.probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await conn.probe
        await self._close(conn)
        self.log.info("disconnected from workload cluster", cluster=str(cluster))

    async def stop(self) -> None:
        """Disconnect from every cluster."""
        for cluster in list(self._connections):
            await self.remove(cluster)

    # -- connecting ---------------------------------------------------------------------

    async def _connection(self, cluster: ObjectKey) -> _Connection:
        conn = self._connections.get(cluster)
        if conn is not None:
            return conn
        lock = self._locks.setdefault(cluster, asyncio.Lock())
        async with lock:
            conn = self._connections.get(cluster)
            if conn is not None:
                return conn
            failed = self._failed.get(cluster)
            if failed and time.monotonic() - failed[0] < self.connect_backoff:
                raise ClusterNotConnected(failed[1])
            try:
                conn = await self._connect(cluster)
            except ClusterNotConnected as exc:
                self._failed[cluster] = (time.monotonic(), str(exc))
                raise
            self._failed.pop(cluster, None)
            self._connections[cluster] = conn
            conn.probe = asyncio.create_task(self._probe_loop(cluster), name=f"probe-{cluster}")
            self.log.info("connected to workload cluster", cluster=str(cluster))
            return conn

    async def _read_secret(self, cluster: ObjectKey) -> tuple[str, bytes]:
        """(resourceVersion, kubeconfig bytes) of the cluster's kubeconfig Secret."""
        name = kubeconfig_secret_name(cluster.name)
        secret = await self.client.get(SECRETS, name, cluster.namespace)
        encoded = (secret.get("data") or {}).get("value")
        if not encoded:
            raise ClusterNotConnected(
                f"secret {cluster.namespace}/{name} has no data key 'value' (kubeconfig)"
            )
        return str(secret["metadata"].get("resourceVersion", "")), base64.b64decode(encoded)

    async def _connect(self, cluster: ObjectKey) -> _Connection:
        secret_name = f"{cluster.namespace}/{kubeconfig_secret_name(cluster.name)}"
        try:
            version, raw = await self._read_secret(cluster)
            kubeconfig: Any = load_yaml(raw)
            client = await Client.from_kubeconfig_dict(
                kubeconfig, user_agent="machinepool-clustercache"
            )
        except ClusterNotConnected:
            raise
        except NotFound as exc:
            raise ClusterNotConnected(
                f"cannot connect to workload cluster {cluster}: secret {secret_name} not found"
            ) from exc
        except Exception as exc:
            raise ClusterNotConnected(
                f"cannot connect to workload cluster {cluster}: kubeconfig from secret"
                f" {secret_name} is unusable: {exc}"
            ) from exc
        if self._metrics is not None:
            client.add_request_hook(self._metrics.on_request)
        try:
            await self._ping(client)
        except Exception as exc:
            await client.close()
            raise ClusterNotConnected(
                f"cannot connect to workload cluster {cluster}: {client.host} does not answer:"
                f" {exc!r}"
            ) from exc
        cache = InformerCache(client, transform=self._transform, logger=self.log)
        await cache.start()
        digest = hashlib.sha256(raw).hexdigest()
        return _Connection(client, cache, version, digest, kubeconfig=kubeconfig)

    async def _ping(self, client: Client) -> None:
        async with asyncio.timeout(self.probe_timeout):
            await client.request("GET", "/version", verb="probe")

    async def _close(self, conn: _Connection) -> None:
        await conn.cache.stop()
        await conn.client.close()

    # -- probing ------------------------------------------------------------------------

    async def _probe_loop(self, cluster: ObjectKey) -> None:
        while cluster in self._connections:
            await asyncio.sleep(self.probe_interval)
            try:
                await self._probe(cluster)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.exception("cluster probe failed unexpectedly", cluster=str(cluster))

    async def _probe(self, cluster: ObjectKey) -> None:
        if await self._gone(cluster):
            self.log.info("cluster or kubeconfig secret is gone", cluster=str(cluster))
            await self.remove(cluster)
            return
        conn = self._connections.get(cluster)
        if conn is None:
            return
        try:
            await self._ping(conn.client)
        except Exception as exc:
            conn.failures += 1
            conn.last_error = repr(exc)
            if conn.failures == self.failure_threshold:
                self.log.warning(
                    "workload cluster unhealthy", cluster=str(cluster), error=conn.last_error
                )
            return
        if conn.failures >= self.failure_threshold:
            self.log.info("workload cluster healthy again", cluster=str(cluster))
        conn.failures = 0

    async def _gone(self, cluster: ObjectKey) -> bool:
        """True when the kubeconfig Secret or the Cluster object no longer exists.

        Also rebuilds the connection when the Secret's content changed.
        """
        try:
            version, raw = await self._read_secret(cluster)
        except NotFound:
            return True
        except ClusterNotConnected:
            return False  # a Secret without data is being written; try next time
        conn = self._connections.get(cluster)
        if conn is not None and version != conn.secret_version:
            await self._maybe_rebuild(cluster, conn, version, raw)
        try:
            await self.client.get(CLUSTERS, cluster.name, cluster.namespace)
        except NotFound as exc:
            # A 404 naming the object means it is gone; one without means the Cluster kind
            # is not served here (no Cluster API CRDs), so only the Secret decides.
            return bool((exc.body.get("details") or {}).get("name"))
        return False

    async def _maybe_rebuild(
        self, cluster: ObjectKey, conn: _Connection, version: str, raw: bytes
    ) -> None:
        digest = hashlib.sha256(raw).hexdigest()
        conn.secret_version = version
        if digest == conn.secret_digest:
            return
        self.log.info("kubeconfig changed; reconnecting", cluster=str(cluster))
        try:
            fresh = await self._connect(cluster)
        except ClusterNotConnected as exc:
            conn.failures += 1
            conn.last_error = str(exc)
            return
        for registration in conn.watches:
            informer = await fresh.cache.get_informer(registration.resource, registration.namespace)
            informer.add_handler(registration.handler)
        fresh.watches = conn.watches
        for informer in conn.cache.informers:  # keep every informer controllers asked for
            await fresh.cache.get_informer(informer.resource, informer.namespace, wait_synced=False)
        fresh.probe = conn.probe
        self._connections[cluster] = fresh
        await self._close(conn)
