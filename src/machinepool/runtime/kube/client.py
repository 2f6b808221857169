"""A raw-JSON Kubernetes API client over kubernetes_asyncio's transport.

Controllers read and write plain ``dict`` objects: no generated models are built on hot paths.
kubernetes_asyncio supplies what is tedious to get right (kubeconfig loading, TLS, token
refresh); this module supplies the verbs controllers need (get, paginated list, create,
replace, patch in every flavour, delete, watch, status and scale subresources), discovery of a
kind's plural and version, and a typed error tree (``machinepool.runtime.kube.errors``).

Every controller, the webhook registration, the CLI and the tests use this one client.
"""

from __future__ import annotations

import asyncio
import enum
import json
import pickle
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import yarl
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client import ApiClient, Configuration

from machinepool.api.registry import Resource as Resource
from machinepool.runtime.kube.errors import ApiError, NotFound, error_for
from machinepool.runtime.kube.ownwrites import note_write

Obj = dict[str, Any]
_T = TypeVar("_T")


def copy_obj(value: _T) -> _T:
    """A deep copy of an object as decoded from the apiserver, or of any part of one.

    What ``copy.deepcopy`` gives for JSON's few types, by a pickle round trip in memory: five
    times as fast on a MachinePool with 1,000 providerIDs and nodeRefs, which each reconcile
    of such a pool copies more than once (the informer's copy it may change, the snapshot its
    patch is a diff against). Only for values this process holds; nothing read from outside
    is ever unpickled.
    """
    if value is None or isinstance(value, (str, int, float)):
        return value  # immutable: nothing to copy
    return pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))  # type: ignore[no-any-return]


DEFAULT_USER_AGENT = "machinepool"
_READ_RETRIES = 5
_WRITES = frozenset({"POST", "PUT", "PATCH"})


class PatchType(enum.StrEnum):
    """The patch flavours the API server accepts, by content type."""

    MERGE = "application/merge-patch+json"
    JSON = "application/json-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"
    APPLY = "application/apply-patch+yaml"


@dataclass
class ObjectList:
    """The items of a (fully paginated) list, and the resourceVersion to watch from."""

    items: list[Obj]
    resource_version: str


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch stream: ADDED, MODIFIED, DELETED, BOOKMARK or ERROR."""

    type: str
    object: Obj


RequestHook = Callable[[str, str, int], None]
"""Called after every request with (verb, resource plural, HTTP status); used for metrics."""


@dataclass
class _Discovery:
    by_kind: dict[tuple[str, str], Resource] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _proxy_for(host: str, configured: str | None) -> tuple[str | None, aiohttp.BasicAuth | None]:
    """The kubeconfig's proxy-url, else HTTPS_PROXY/HTTP_PROXY unless NO_PROXY exempts the
    host (what client-go honours), resolved once per client."""
    if configured:
        return configured, None
    try:
        proxy, auth = aiohttp.helpers.get_env_proxy_for_url(yarl.URL(host))
    except LookupError:
        return None, None
    return str(proxy), auth


class Client:
    """An async Kubernetes client speaking raw JSON.

    Build one with :meth:`from_kubeconfig` or :meth:`from_kubeconfig_dict` and close it with
    ``await client.close()`` (or use it as an async context manager).
    """

    def __init__(
        self,
        api_client: ApiClient,
        *,
        user_agent: str = DEFAULT_USER_AGENT,
        on_request: RequestHook | None = None,
    ) -> None:
        self._api = api_client
        self._host = str(api_client.configuration.host).rstrip("/")
        self._user_agent = user_agent
        self._on_request = on_request
        self._request_hooks: list[RequestHook] = []
        self._discovery = _Discovery()
        self._closed = False
        self._session: aiohttp.ClientSession | None = None
        self._proxy, self._proxy_auth = _proxy_for(self._host, api_client.configuration.proxy)

    # -- construction -----------------------------------------------------------------

    @classmethod
    async def from_kubeconfig(
        cls,
        path: str | Path | None = None,
        *,
        context: str | None = None,
        user_agent: str = DEFAULT_USER_AGENT,
        on_request: RequestHook | None = None,
    ) -> Client:
        """Load a kubeconfig file (``None``: ``$KUBECONFIG`` or ``~/.kube/config``)."""
        cfg = Configuration()
        await k8s_config.load_kube_config(
            config_file=str(path) if path else None, context=context, client_configuration=cfg
        )
        return cls(ApiClient(cfg), user_agent=user_agent, on_request=on_request)

    @classmethod
    async def from_kubeconfig_dict(
        cls,
        kubeconfig: Mapping[str, Any],
        *,
        context: str | None = None,
        user_agent: str = DEFAULT_USER_AGENT,
        on_request: RequestHook | None = None,
    ) -> Client:
        """Build a client from a parsed kubeconfig (for example a cluster's kubeconfig Secret)."""
        cfg = Configuration()
        await k8s_config.load_kube_config_from_dict(
            config_dict=dict(kubeconfig), context=context, client_configuration=cfg
        )
        return cls(ApiClient(cfg), user_agent=user_agent, on_request=on_request)

    @classmethod
    def from_certificate(
        cls,
        server: str,
        ca_pem: bytes,
        cert_pem: bytes,
        key_pem: bytes,
        *,
        user_agent: str = DEFAULT_USER_AGENT,
    ) -> Client:
        """A client that trusts ``ca_pem`` and presents the client certificate ``cert_pem``
        with its key ``key_pem`` (all PEM), for credentials held in memory (a simulated
        kubelet's signed certificate). The PEMs pass through files in a private temporary
        directory only while the TLS context loads them; nothing stays on disk.
        """
        cfg = Configuration(host=server)
        with tempfile.TemporaryDirectory(prefix="machinepool-tls-") as tmp:
            folder = Path(tmp)
            for name, data in (("ca.crt", ca_pem), ("tls.crt", cert_pem), ("tls.key", key_pem)):
                (folder / name).touch(mode=0o600)
                (folder / name).write_bytes(data)
            cfg.ssl_ca_cert = str(folder / "ca.crt")
            cfg.cert_file = str(folder / "tls.crt")
            cfg.key_file = str(folder / "tls.key")
            api = ApiClient(cfg)  # its TLS context is loaded here, from the files
        return cls(api, user_agent=user_agent)

    @classmethod
    async def in_cluster(
        cls, *, user_agent: str = DEFAULT_USER_AGENT, on_request: RequestHook | None = None
    ) -> Client:
        """The pod's own ServiceAccount credentials."""
        cfg = Configuration()
        k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        return cls(ApiClient(cfg), user_agent=user_agent, on_request=on_request)

    @property
    def host(self) -> str:
        return self._host

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._session is not None:
                await self._session.close()
            await self._api.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- transport --------------------------------------------------------------------

    async def _headers(self, content_type: str = "application/json") -> dict[str, str]:
        headers = {
            "Accept": "application/json",
            "Content-Type": content_type,
            "User-Agent": self._user_agent,
        }
        await self._api.update_params_for_auth(headers, [], ["BearerToken"])
        return headers

    async def _open(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        client_timeout: aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        if self._closed:
            raise RuntimeError("client used after close()")
        data = None if body is None else json.dumps(body)
        return await self._http().request(
            method,
            self._host + path,
            params=params,
            data=data,
            headers=await self._headers(content_type),
            proxy=self._proxy,
            proxy_auth=self._proxy_auth,
            timeout=client_timeout or aiohttp.ClientTimeout(total=60),
        )

    def _http(self) -> aiohttp.ClientSession:
        """Our session over kubernetes_asyncio's connection pool (its TLS settings).

        kubernetes_asyncio's own session trusts the environment, which makes aiohttp look up
        proxy variables and ``.netrc`` in a worker thread on every request; we resolve the
        proxy once (``_proxy_for``) and send each request without the thread hop.
        """
        if self._session is None:
            pool: aiohttp.ClientSession = self._api.rest_client.pool_manager
            self._session = aiohttp.ClientSession(
                connector=pool.connector,
                connector_owner=False,
                trust_env=False,
                read_bufsize=2**21,  # large watch events, as kubernetes_asyncio allows
            )
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        verb: str | None = None,
    ) -> Obj:
        """Send one request and return its JSON body; raise an ``ApiError`` on failure.

        Requests answered 429 (the server's watch cache is still initializing a new kind, or
        it is shedding load: max-requests-inflight, priority and fairness) are retried a few
        times after the server's Retry-After, at most a second each, as client-go does: reads
        always, writes when the server sent Retry-After. Before, a write's 429 went straight
        to the reconcile, whose key was then retried on the next event while the server was
        still asking everyone to slow down. Evictions are never retried here: their 429 is a
        PodDisruptionBudget's answer, which the drain must see.
        """
        for attempt in range(_READ_RETRIES + 1):
            async with await self._open(
                method, path, params=params, body=body, content_type=content_type
            ) as resp:
                raw = await resp.read()
                self._count(verb or method.lower(), path, resp.status)
                retry = (
                    resp.status == 429
                    and attempt < _READ_RETRIES
                    and _retryable_429(method, path, resp.headers.get("Retry-After"))
                )
                if not retry:
                    answer = _decode(resp.status, raw)
                    if method in _WRITES:
                        note_write(answer)  # for the writing controller's echo filter
                    return answer
                delay = _retry_after(resp.headers.get("Retry-After"))
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _count(self, verb: str, path: str, status: int) -> None:
        if self._on_request is None and not self._request_hooks:
            return
        plural = _plural_of(path)
        if self._on_request is not None:
            self._on_request(verb, plural, status)
        for hook in self._request_hooks:
            hook(verb, plural, status)

    def add_request_hook(self, hook: RequestHook) -> Callable[[], None]:
        """Also call ``hook`` after every request (a ``Manager`` counts requests this way).

        Returns a function that removes the hook again.
        """
        self._request_hooks.append(hook)

        def remove() -> None:
            if hook in self._request_hooks:
                self._request_hooks.remove(hook)

        return remove

    # -- discovery --------------------------------------------------------------------

    async def resource(self, api_version: str, kind: str) -> Resource:
        """Find the plural and scope of ``kind`` in ``api_version`` by API discovery.

        An empty version (``"cluster.x-k8s.io/"``) resolves through the group's preferred
        version.
        """
        group, _, version = api_version.rpartition("/")
        key = (f"{group}/{version}" if group else version, kind)
        cached = self._discovery.by_kind.get(key)
        if cached is not None:
            return cached
        async with self._discovery.lock:
            if not version:
                version = await self._preferred_version(group)
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            listing = await self.request("GET", path, verb="discovery")
            for item in listing.get("resources", []):
                if "/" in item["name"]:
                    continue
                res = Resource(group, version, item["name"], item["kind"], item["namespaced"])
                self._discovery.by_kind[(res.api_version, res.kind)] = res
                self._discovery.by_kind[(f"{group}/", res.kind)] = res
        found = self._discovery.by_kind.get((f"{group}/{version}" if group else version, kind))
        if found is None:
            raise NotFound(404, "NotFound", f"kind {kind} is not served in {group}/{version}")
        return found

    async def _preferred_version(self, group: str) -> str:
        info = await self.request("GET", f"/apis/{group}", verb="discovery")
        return str(info["preferredVersion"]["version"])

    # -- verbs ------------------------------------------------------------------------

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        return await self.request("GET", res.path(namespace, name), verb="get")

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
    ) -> ObjectList:
        """List every object, following ``continue`` tokens until the last page."""
        params: dict[str, str] = {"limit": str(page_size)}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        items: list[Obj] = []
        while True:
            page = await self.request("GET", res.path(namespace), params=params, verb="list")
            kind = res.kind
            for item in page.get("items") or []:
                item.setdefault("apiVersion", res.api_version)
                item.setdefault("kind", kind)
                items.append(item)
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return ObjectList(items, str(meta.get("resourceVersion", "")))
            params["continue"] = token

    async def create(
        self, res: Resource, body: Obj, namespace: str | None = None, *, dry_run: bool = False
    ) -> Obj:
        ns = namespace or body.get("metadata", {}).get("namespace")
        params = {"dryRun": "All"} if dry_run else None
        body = {"apiVersion": res.api_version, "kind": res.kind, **body}
        return await self.request("POST", res.path(ns), body=body, params=params, verb="create")

    async def replace(self, res: Resource, body: Obj, *, subresource: str | None = None) -> Obj:
        """PUT the whole object; its resourceVersion is the optimistic-lock precondition."""
        meta = body["metadata"]
        path = res.path(meta.get("namespace"), meta["name"])
        if subresource:
            path += f"/{subresource}"
        return await self.request("PUT", path, body=body, verb="update")

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = False,
    ) -> Obj:
        """Patch an object or one of its subresources (``status``, ``scale``).

        For server-side apply (``PatchType.APPLY``) ``field_manager`` is required and ``patch``
        is the applied configuration as a dict.
        """
        path = res.path(namespace, name) + (f"/{subresource}" if subresource else "")
        params: dict[str, str] = {}
        if field_manager:
            params["fieldManager"] = field_manager
        if force:
            params["force"] = "true"
        return await self.request(
            "PATCH", path, params=params, body=patch, content_type=patch_type.value, verb="patch"
        )

    async def apply(
        self, res: Resource, body: Obj, *, field_manager: str, force: bool = True
    ) -> Obj:
        """Server-side apply ``body`` (which names itself) as ``field_manager``."""
        meta = body["metadata"]
        body = {"apiVersion": res.api_version, "kind": res.kind, **body}
        return await self.patch(
            res,
            meta["name"],
            body,
            meta.get("namespace"),
            patch_type=PatchType.APPLY,
            field_manager=field_manager,
            force=force,
        )

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation_policy: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> Obj | None:
        """Delete an object; ``None`` when it was already gone.

        ``uid`` and ``resource_version`` become preconditions, so a delete never hits a
        newer object of the same name.
        """
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        pairs = (("uid", uid), ("resourceVersion", resource_version))
        preconditions = {k: v for k, v in pairs if v}
        if preconditions:
            body["preconditions"] = preconditions
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        try:
            return await self.request("DELETE", res.path(namespace, name), body=body, verb="delete")
        except NotFound:
            return None

    async def get_scale(self, res: Resource, name: str, namespace: str) -> Obj:
        return await self.request("GET", res.path(namespace, name) + "/scale", verb="get")

    async def set_scale(self, res: Resource, name: str, namespace: str, replicas: int) -> Obj:
        """Set ``spec.replicas`` through the scale subresource, as kubectl and the autoscaler do."""
        return await self.patch(
            res, name, {"spec": {"replicas": replicas}}, namespace, subresource="scale"
        )

    async def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str = "",
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        pacer: ReadPacer | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Stream watch events from ``resource_version`` with bookmarks enabled.

        Ends when the server closes the stream (after ``timeout_seconds``). An ERROR event
        carrying a 410 raises ``Gone``: the caller re-lists. ``pacer``: the one a caller that
        re-opens the watch keeps across streams (an informer); without it a kind that reports
        on a timer gets a fresh one (``reports_on_a_timer``).
        """
        params = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if resource_version:
            params["resourceVersion"] = resource_version
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=timeout_seconds + 30)
        resp = await self._open("GET", res.path(namespace), params=params, client_timeout=timeout)
        async with resp:
            self._count("watch", res.path(namespace), resp.status)
            if resp.status != 200:
                _decode(resp.status, await resp.read())
            if pacer is None and reports_on_a_timer(res):
                pacer = ReadPacer()
            buf = bytearray()
            while True:
                hold = pacer.hold() if pacer is not None else 0.0
                if hold and resp.connection is not None and resp.connection.transport:
                    await _unread_for(resp.connection.transport, hold)
                chunk = await resp.content.readany()
                if not chunk:  # the server ended the watch
                    if buf.strip():
                        yield _event(buf)
                    return
                buf += chunk
                if b"\n" not in chunk:
                    continue  # an event larger than a read: wait for the rest
                *lines, rest = buf.split(b"\n")
                buf = rest
                for line in lines:
                    if line.strip():
                        if pacer is not None:
                            pacer.seen()
                        yield _event(line)


def reports_on_a_timer(res: Resource) -> bool:
    """Whether ``res``'s objects change on a timer, so a busy watch of them is read in batches.

    Nodes do: each kubelet reports its Node's status every 5 minutes (``lastHeartbeatTime``)
    whether or not anything changed, so at 10,000 Nodes every Node watch gets about 33 updates
    a second that no controller acts on. Taken one at a time, each costs a wakeup, a TLS read
    and a decode from cold caches, about 0.6 ms: 2 % of a core; read together, about a fifth
    of that (``bench/bench_node_watch.py``). Every other kind here changes because someone
    acted, and its events are what a reconcile waits for: a busy MachinePool or Machine watch
    (a few pools scaled back to back make one) is read the moment data arrives.
    """
    return res.group == "" and res.kind == "Node"


WATCH_BUSY_RATE = 15.0
"""Events a second, over the last whole window, from which a Node watch is read in batches.
Below it a watch costs under 1 % of a core unbatched, and every event is read at once."""
WATCH_BATCH_WINDOW = 2.0
"""Seconds over which a watch's rate is counted; a burst shorter than this does not batch."""
WATCH_BUSY_FOR = 60.0
"""Seconds over which a Node watch must average ``WATCH_BUSY_RATE`` for its reads to be held.
Kubelets' reports keep a watch that busy for as long as the Nodes exist, though unevenly: a
pool's Nodes, made together, report together, so after a rollout at 10,000 Nodes most 2-second
windows brought fewer than 15 reports and a few brought hundreds. The benchmark's latency
trials bring about 18 Node events a second for as long as they run (200 trials: 23 s), and a
Node change then is what a reconcile waits for: held from any busy window, their last Node
Ready -> MachinePool Running rose from 188 ms to 470 ms at p99 (4f733fd); over 60 s they
average 7 a second."""
WATCH_BATCH_EVENTS = 20
"""Events a busy watch waits to gather: the wait is this many at the current rate."""
WATCH_MAX_HOLD = 0.5
"""The longest a busy watch leaves an event unread, in seconds. At 10,000 Nodes' reports (33
a second) a Node informer spent 0.19 ms an update with 200 ms, 0.13 to 0.14 ms with 500 ms
and 0.12 ms with a second (``bench/bench_node_watch.py --nodes 3000 --updates 1500 --reads
batched``, one run each at ea428fa): half a second takes most of what holding longer could,
for a Node change seen at most half a second late, and only while thousands of Nodes keep the
watch busy."""


class ReadPacer:
    """When a watch stream is busy, how long to leave it unread before the next read.

    A stream that brought ``WATCH_BUSY_RATE`` events a second on average over the last
    ``WATCH_BUSY_FOR`` seconds has its events wait at most ``WATCH_MAX_HOLD`` seconds (less as
    the rate grows, so the server's buffers never hold more than about ``WATCH_BATCH_EVENTS``
    events); any other stream is read at once. One pacer serves a watch across its
    reconnections (an informer's stream is re-opened every few minutes), so a steadily busy
    watch does not start over.
    """

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, span: float | None = None
    ) -> None:
        """``span``: seconds the rate is averaged over (``WATCH_BUSY_FOR`` if omitted)."""
        span = WATCH_BUSY_FOR if span is None else span
        self._clock = clock
        self._window_start = clock()
        self._count = 0
        self._windows: deque[int] = deque(maxlen=max(1, round(span / WATCH_BATCH_WINDOW)))
        """Events in each of the last whole windows (``span``'s worth), the newest last."""

    def seen(self) -> None:
        """Count one event."""
        self._roll()
        self._count += 1

    def hold(self) -> float:
        """Seconds to leave the stream unread before reading it again (0: read now)."""
        self._roll()
        # A fresh pacer's missing windows count as quiet ones.
        steady = sum(self._windows) / (WATCH_BATCH_WINDOW * (self._windows.maxlen or 1))
        if steady < WATCH_BUSY_RATE:
            return 0.0
        # A window busier than the average (a pool's Nodes reporting together) holds less.
        rate = max(steady, self._windows[-1] / WATCH_BATCH_WINDOW)
        return min(WATCH_MAX_HOLD, WATCH_BATCH_EVENTS / rate)

    def _roll(self) -> None:
        elapsed = int((self._clock() - self._window_start) // WATCH_BATCH_WINDOW)
        if elapsed < 1:
            return
        self._windows.append(self._count)
        self._windows.extend([0] * min(elapsed - 1, self._windows.maxlen or 0))
        self._window_start += elapsed * WATCH_BATCH_WINDOW
        self._count = 0


async def _unread_for(transport: asyncio.BaseTransport, seconds: float) -> None:
    """Leave ``transport`` unread for ``seconds``, so what arrives meanwhile is read at once.

    Pausing a TLS transport only stops it handing data up; its read-buffer limits at zero also
    stop it reading the socket, which is the wakeup that costs.
    """
    if not isinstance(transport, asyncio.ReadTransport) or transport.is_closing():
        return
    limits = getattr(transport, "get_read_buffer_limits", None)
    set_limits = getattr(transport, "set_read_buffer_limits", None)
    saved = limits() if limits is not None and set_limits is not None else None
    transport.pause_reading()
    try:
        if saved is not None and set_limits is not None:
            set_limits(high=0)
        await asyncio.sleep(seconds)
    finally:
        # A connection closed meanwhile is left alone: restoring a closed TLS transport's
        # limits makes it resume a socket transport that is gone (AttributeError).
        if not transport.is_closing():
            if saved is not None and set_limits is not None:
                low, high = saved
                set_limits(high=high, low=low)
            transport.resume_reading()


def _event(line: bytes | bytearray) -> WatchEvent:
    """One line of a watch stream; an ERROR event is raised (a 410 as ``Gone``)."""
    event = json.loads(line)
    if event.get("type") == "ERROR":
        status = event.get("object") or {}
        raise error_for(int(status.get("code", 500)), status)
    return WatchEvent(event["type"], event["object"])


def _retryable_429(method: str, path: str, retry_after: str | None) -> bool:
    """A 429 the client waits out: any read; a write the server said when to retry, unless it
    is an eviction (a PodDisruptionBudget's refusal, also sent with Retry-After)."""
    if method == "GET":
        return True
    return retry_after is not None and not path.rstrip("/").endswith("/eviction")


def _retry_after(header: str | None) -> float:
    try:
        return min(max(float(header or 1), 0.1), 1.0)
    except ValueError:
        return 1.0


def _decode(status: int, raw: bytes) -> Obj:
    text = raw.decode("utf-8", errors="replace")
    try:
        body = json.loads(text) if text else {}
    except json.JSONDecodeError:
        body = {}
    if 200 <= status < 300:
        if not isinstance(body, dict):
            raise ApiError(status, "BadResponse", "expected a JSON object")
        return body
    raise error_for(status, body if isinstance(body, dict) else None, text[:500])


def _plural_of(path: str) -> str:
    """The resource plural named by an API path, for metrics labels."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if "namespaces" in parts:
        i = parts.index("namespaces")
        parts = parts[:i] + parts[i + 2 :] if len(parts) > i + 2 else parts
    offset = 2 if parts and parts[0] == "api" else 3
    return parts[offset] if len(parts) > offset else (parts[-1] if parts else "")


CRDS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
NODES = Resource("", "v1", "nodes", "Node", False)
PODS = Resource("", "v1", "pods", "Pod")
SECRETS = Resource("", "v1", "secrets", "Secret")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
EVENTS = Resource("events.k8s.io", "v1", "events", "Event")
CORE_EVENTS = Resource("", "v1", "events", "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
PERSISTENT_VOLUMES = Resource("", "v1", "persistentvolumes", "PersistentVolume", False)
VOLUME_ATTACHMENTS = Resource(
    "storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", False
)
VALIDATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    False,
)
MUTATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    False,
)


async def wait_established(client: Client, name: str, timeout: float = 60.0) -> None:
    """Until the CustomResourceDefinition ``name`` is Established: its kind is served.

    A kind cannot be created, listed or watched for a moment after its CRD is written; whoever
    installs CRDs and then uses them (the local environment, benchmarks, tests) waits here.
    Raises ``TimeoutError`` after ``timeout`` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        crd = await client.get(CRDS, name)
        conditions = (crd.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            return
        if loop.time() >= deadline:
            raise TimeoutError(f"CRD {name} was not Established within {timeout:.0f} s")
        await asyncio.sleep(0.1)
