"""Informers: a watched, indexed, in-memory copy of one kind, and the factory that shares them.

An ``Informer`` lists a resource (all namespaces, one, or several; optionally a label/field
selector), then watches from the list's resourceVersion with bookmarks. Several namespaces are
one list+watch stream each, feeding one store: that is how a manager restricted to a few
namespaces (``--namespace``, RBAC by Role) still gives controllers one informer per kind. It
keeps the objects as raw dicts keyed by ``ObjectKey``, maintains indexes, and calls event
handlers on every add, update and delete. When the watch breaks it resumes from the last
resourceVersion it saw (so an API server restart loses nothing); when that version is too old
(410 Gone) it lists again and reports the difference as adds, updates and deletes. Failures
back off exponentially (0.5 s to 30 s).

An add says whether it comes from the initial list (``on_add(obj, initial=True)``: a
stream's first list, or the replay of what the informer holds to a handler added later) or
from a change seen since, as client-go's ``OnAdd(obj, isInInitialList)``; a controller
queues the first kind at low priority. A re-list after 410 reports only what differs from
the store, changes missed while the watch was down, so its adds are not initial ones.

Initial adds come in random order, not the API server's (which sorts by name). A controller
restarted more often than it gets through its backlog would otherwise serve the same objects
first every time and the last ones never: in the full-size faults run, pools p2-p9 of p0-p19
rolled a tenth as fast as the rest.

``InformerCache`` hands out one shared informer per (resource, namespace, selector) and starts
it on first use, so a controller can watch a kind it only learns at runtime (a bootstrap config
kind named by a ref). The ``Manager`` owns one for the management cluster; ``ClusterCache``
owns one per workload cluster. Controllers read through ``Informer.get``/``list``/``by_index``
and subscribe with ``Controller.watch``.

Memory: objects are stored as they arrive, after ``transform`` (by default dropping
``metadata.managedFields``, which is often half of an object). Handlers must not mutate them.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from machinepool.runtime.kube.client import Client, Obj, ReadPacer, Resource, reports_on_a_timer
from machinepool.runtime.kube.errors import Gone
from machinepool.runtime.kube.keys import ObjectKey
from machinepool.runtime.telemetry.logging import KVLogger, get_logger

Transform = Callable[[Obj], Obj]
"""Rewrites an object before it is stored (must return a dict; may mutate its argument)."""

IndexFunc = Callable[[Obj], Iterable[str]]
"""The index values of an object, e.g. ``[spec.providerID]``; empty for none."""


_T = TypeVar("_T")


def shuffled(items: Iterable[_T]) -> list[_T]:
    """``items`` in random order: how initial adds are handed out (see the module docstring)."""
    out = list(items)
    random.shuffle(out)
    return out


class EventHandler(Protocol):
    """Receives an informer's changes. Called on the informer's task: keep it quick."""

    def on_add(self, obj: Obj, initial: bool = False) -> None:
        """``obj`` appeared; ``initial``: it was merely listed (see the module docstring)."""

    def on_update(self, old: Obj, new: Obj) -> None: ...
    def on_delete(self, obj: Obj) -> None: ...


class WatchingHandler(EventHandler, Protocol):
    """A handler that wants to know what it is subscribed to: ``Informer.add_handler`` calls
    its ``watching`` with the informer's resource first (a controller's handler, so the
    controller records its own writes of that kind: ``machinepool.runtime.kube.ownwrites``)."""

    def watching(self, resource: Resource) -> None: ...


@dataclass(frozen=True)
class FuncHandler:
    """An ``EventHandler`` from optional callables; missing ones ignore the event."""

    add: Callable[[Obj], None] | None = None
    update: Callable[[Obj, Obj], None] | None = None
    delete: Callable[[Obj], None] | None = None

    def on_add(self, obj: Obj, initial: bool = False) -> None:
        if self.add:
            self.add(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        if self.update:
            self.update(old, new)

    def on_delete(self, obj: Obj) -> None:
        if self.delete:
            self.delete(obj)


def strip_managed_fields(obj: Obj) -> Obj:
    """The default transform: drop ``metadata.managedFields`` (controllers never read it)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def field_indexer(path: str) -> IndexFunc:
    """Index by the string at a dotted path, e.g. ``field_indexer("spec.providerID")``."""
    parts = path.split(".")

    def index(obj: Obj) -> list[str]:
        value: Any = obj
        for part in parts:
            if not isinstance(value, dict):
                return []
            value = value.get(part)
        return [str(value)] if value not in (None, "") else []

    return index


def label_indexer(label: str) -> IndexFunc:
    """Index by a label's value, e.g. ``label_indexer("cluster.x-k8s.io/cluster-name")``."""

    def index(obj: Obj) -> list[str]:
        value = ((obj.get("metadata") or {}).get("labels") or {}).get(label)
        return [str(value)] if value else []

    return index


def controller_owner(obj: Obj) -> Obj | None:
    """The ownerReference marked ``controller: true``, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def owner_indexer(kind: str, group: str) -> IndexFunc:
    """Index by the name of the controller owner of ``kind`` in API ``group``.

    Values are ``namespace/name`` of the owner (owners live in the object's namespace).
    """

    def index(obj: Obj) -> list[str]:
        ref = controller_owner(obj)
        if ref is None or ref.get("kind") != kind or _group(ref.get("apiVersion", "")) != group:
            return []
        return [str(ObjectKey(ObjectKey.of(obj).namespace, str(ref.get("name", ""))))]

    return index


def _group(api_version: str) -> str:
    group, _, _ = str(api_version).rpartition("/")
    return group


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class _Index:
    """One named index: value -> keys, and key -> values to remove stale entries."""

    def __init__(self, fn: IndexFunc) -> None:
        self.fn = fn
        self.by_value: dict[str, set[ObjectKey]] = {}
        self.by_key: dict[ObjectKey, tuple[str, ...]] = {}

    def put(self, key: ObjectKey, obj: Obj) -> None:
        values = tuple(self.fn(obj))
        old = self.by_key.get(key, ())
        if values == old:
            return
        self.remove(key)
        if values:
            self.by_key[key] = values
        for value in values:
            self.by_value.setdefault(value, set()).add(key)

    def remove(self, key: ObjectKey) -> None:
        for value in self.by_key.pop(key, ()):
            keys = self.by_value.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.by_value[value]


class Informer:
    """List-then-watch cache of one resource, with indexes and event handlers.

    Options (defaults in brackets): ``namespace`` [all], or ``namespaces`` for several (one
    list+watch each, merged into one store), ``label_selector``/``field_selector``
    [none], ``transform`` [``strip_managed_fields``; ``None`` stores objects untouched],
    ``watch_timeout`` seconds per watch request [300, jittered up to 2x as client-go does],
    ``backoff_base``/``backoff_cap`` seconds between failed attempts [0.5/30].

    >>> nodes = Informer(client, NODES, indexers={"providerID": field_indexer("spec.providerID")})
    >>> await nodes.start(); await nodes.wait_synced()
    >>> nodes.by_index("providerID", "sim://pool/i-1")
    """

    def __init__(
        self,
        client: Client,
        resource: Resource,
        namespace: str | None = None,
        *,
        namespaces: Iterable[str] = (),
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = strip_managed_fields,
        indexers: dict[str, IndexFunc] | None = None,
        watch_timeout: int = 300,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        logger: KVLogger | None = None,
    ) -> None:
        streams = tuple(sorted(set(namespaces)))
        if streams and namespace is not None:
            raise ValueError("pass namespace or namespaces, not both")
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.namespaces: tuple[str | None, ...] = streams or (namespace,)
        self.label_selector = label_selector
        self.field_selector = field_selector
        self._transform = transform
        self._watch_timeout = watch_timeout
        self._backoff = (backoff_base, backoff_cap)
        self._store: dict[ObjectKey, Obj] = {}
        self._indexes: dict[str, _Index] = {}
        self._handlers: list[EventHandler] = []
        self._synced = asyncio.Event()
        self._unsynced: set[str | None] = set(self.namespaces)
        self._task: asyncio.Task[None] | None = None
        self._versions: dict[str | None, str] = dict.fromkeys(self.namespaces, "")
        self._pacers: dict[str | None, ReadPacer] = (
            {ns: ReadPacer() for ns in self.namespaces} if reports_on_a_timer(resource) else {}
        )
        """Each busy-on-a-timer stream's pacer, kept across its re-opened watches."""
        self.log = (logger or get_logger(__name__)).bind(
            informer=resource.plural, namespace=",".join(n or "" for n in self.namespaces)
        )
        for name, fn in (indexers or {}).items():
            self.add_indexer(name, fn)

    # -- reading ------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._store)

    @property
    def has_synced(self) -> bool:
        """True once the first list has been stored (and stays true across re-lists)."""
        return self._synced.is_set()

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen (list, event or bookmark) by the first stream."""
        return self._versions[self.namespaces[0]]

    async def wait_synced(self) -> None:
        """Wait for the first list (bound it with ``asyncio.timeout``)."""
        await self._synced.wait()

    def get(self, name: str, namespace: str = "") -> Obj | None:
        """The stored object (shared: do not mutate it), or ``None``."""
        return self._store.get(ObjectKey(namespace, name))

    def get_key(self, key: ObjectKey) -> Obj | None:
        return self._store.get(key)

    def list(self, namespace: str | None = None) -> builtins.list[Obj]:
        """Every stored object, or those in ``namespace``."""
        if namespace is None:
            return list(self._store.values())
        return [o for k, o in self._store.items() if k.namespace == namespace]

    def keys(self) -> builtins.list[ObjectKey]:
        return list(self._store)

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        """Objects whose index function returned ``value``; ``KeyError`` for unknown indexes."""
        keys = self._indexes[index].by_value.get(value, ())
        return [self._store[k] for k in keys if k in self._store]

    def index_values(self, index: str) -> builtins.list[str]:
        return list(self._indexes[index].by_value)

    # -- configuring --------------------------------------------------------------------

    def add_indexer(self, name: str, fn: IndexFunc) -> None:
        """Add an index (also over objects already stored); names are unique."""
        if name in self._indexes:
            raise ValueError(f"informer {self.resource.plural} already has an index {name!r}")
        index = _Index(fn)
        for key, obj in self._store.items():
            index.put(key, obj)
        self._indexes[name] = index

    def add_handler(self, handler: EventHandler) -> None:
        """Subscribe ``handler``; objects already stored are replayed to it as initial adds. A
        handler with a ``watching`` method (``WatchingHandler``) is told the resource first."""
        watching = getattr(handler, "watching", None)
        if callable(watching):
            watching(self.resource)
        self._handlers.append(handler)
        for obj in shuffled(self._store.values()):
            self._call(handler.on_add, obj, initial=True)

    def remove_handler(self, handler: EventHandler) -> None:
        with contextlib.suppress(ValueError):
            self._handlers.remove(handler)

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Start listing and watching in a background task (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(
                self._run_streams(), name=f"informer-{self.resource.plural}"
            )

    async def stop(self) -> None:
        """Stop watching; the store keeps its last contents."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- the list/watch loop ------------------------------------------------------------

    async def _run_streams(self) -> None:
        """One list+watch loop per namespace stream; all feed the one store."""
        if len(self.namespaces) == 1:
            await self._run(self.namespaces[0])
            return
        async with asyncio.TaskGroup() as group:
            for namespace in self.namespaces:
                group.create_task(self._run(namespace))

    async def _run(self, namespace: str | None) -> None:
        delay = self._backoff[0]
        need_list = True
        while True:
            try:
                if need_list:
                    await self._relist(namespace)
                    need_list = False
                await self._watch(namespace)
                delay = self._backoff[0]  # a watch that ended cleanly resets the backoff
            except Gone:
                self.log.info("resourceVersion too old; re-listing", rv=self._versions[namespace])
                need_list = True
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.log.warning("list/watch failed; retrying", error=repr(exc), delay=delay)
                await asyncio.sleep(delay * random.uniform(1.0, 1.2))
                delay = min(delay * 2, self._backoff[1])

    async def _relist(self, namespace: str | None) -> None:
        listed = await self.client.list(
            self.resource,
            namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        )
        fresh: dict[ObjectKey, Obj] = {}
        for item in listed.items:
            obj = self._prepare(item)
            fresh[ObjectKey.of(obj)] = obj
        initial = namespace in self._unsynced  # not a re-list after 410: see the module doc
        mine = [k for k in self._store if namespace is None or k.namespace == namespace]
        for key in [k for k in mine if k not in fresh]:
            self._delete(key, self._store[key])
        for key, obj in shuffled(fresh.items()) if initial else fresh.items():
            self._upsert(key, obj, initial)
        self._versions[namespace] = listed.resource_version
        self._unsynced.discard(namespace)
        if not self._unsynced:
            self._synced.set()

    async def _watch(self, namespace: str | None) -> None:
        timeout = int(self._watch_timeout * random.uniform(1.0, 2.0))
        stream = self.client.watch(
            self.resource,
            namespace,
            resource_version=self._versions[namespace],
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=timeout,
            pacer=self._pacers.get(namespace),
        )
        async for event in stream:
            rv = _rv(event.object)
            if event.type == "BOOKMARK":
                self._versions[namespace] = rv or self._versions[namespace]
                continue
            obj = self._prepare(event.object)
            key = ObjectKey.of(obj)
            if event.type == "DELETED":
                self._delete(key, self._store.get(key, obj))
            else:
                self._upsert(key, obj)
            self._versions[namespace] = rv or self._versions[namespace]

    def _prepare(self, obj: Obj) -> Obj:
        obj.setdefault("apiVersion", self.resource.api_version)
        obj.setdefault("kind", self.resource.kind)
        return self._transform(obj) if self._transform is not None else obj

    def _upsert(self, key: ObjectKey, obj: Obj, initial: bool = False) -> None:
        old = self._store.get(key)
        if old is not None and _rv(old) == _rv(obj):
            return  # a re-list repeating what we have: nothing changed
        self._store[key] = obj
        for index in self._indexes.values():
            index.put(key, obj)
        for handler in list(self._handlers):
            if old is None:
                self._call(handler.on_add, obj, initial=initial)
            else:
                self._call(handler.on_update, old, obj)

    def _delete(self, key: ObjectKey, obj: Obj) -> None:
        self._store.pop(key, None)
        for index in self._indexes.values():
            index.remove(key)
        for handler in list(self._handlers):
            self._call(handler.on_delete, obj)

    def _call(self, fn: Callable[..., None], *args: Obj, **kwargs: bool) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:
            self.log.exception("event handler failed", object=str(ObjectKey.of(args[-1])))


def _everything(resource: Resource) -> bool:
    return True


@dataclass(frozen=True)
class CacheScope:
    """Which objects one cluster's informers hold: the manager's ``--namespace`` and
    ``--watch-filter`` as a cache, so a manager never even stores another manager's objects.

    ``namespaces``: watch only these (empty: all namespaces). A namespaced resource asked for
    across all namespaces gets one informer with a stream per namespace here.
    ``label_selector``: added (ANDed) to the selector of every informer whose resource
    ``filters`` accepts; for example ``cluster.x-k8s.io/watch-filter=shard-a`` for the Cluster
    API kinds only, since Secrets, Nodes and Events carry no such label.
    """

    namespaces: tuple[str, ...] = ()
    label_selector: str | None = None
    filters: Callable[[Resource], bool] = _everything

    def selector(self, resource: Resource, wanted: str | None) -> str | None:
        """``wanted`` ANDed with this scope's selector where it applies to ``resource``."""
        parts = [wanted, self.label_selector if self.filters(resource) else None]
        return ",".join(p for p in parts if p) or None

    def streams(self, resource: Resource, namespace: str | None) -> tuple[str, ...]:
        """The namespaces to watch for a request of ``namespace`` (``()``: just that one)."""
        if not resource.namespaced or namespace is not None:
            return ()
        return self.namespaces


@dataclass(frozen=True)
class _InformerKey:
    resource: Resource
    namespace: str | None
    label_selector: str | None


class InformerCache:
    """Shared informers for one cluster, started on first use once the cache runs.

    ``get_informer`` before ``start`` registers an informer that starts with the cache;
    after ``start`` it starts the informer at once and (by default) waits for its first list.
    """

    def __init__(
        self,
        client: Client,
        *,
        transform: Transform | None = strip_managed_fields,
        scope: CacheScope | None = None,
        logger: KVLogger | None = None,
    ) -> None:
        self.client = client
        self.scope = scope or CacheScope()
        self._transform = transform
        self._informers: dict[_InformerKey, Informer] = {}
        self._lock = asyncio.Lock()
        self._started = False
        self.log = logger or get_logger(__name__)

    @property
    def started(self) -> bool:
        return self._started

    @property
    def informers(self) -> list[Informer]:
        return list(self._informers.values())

    async def get_informer(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        wait_synced: bool = True,
    ) -> Informer:
        """The shared informer for ``resource`` (in ``namespace``, matching the selector).

        The cache's ``scope`` narrows it further: all namespaces means the scope's namespaces,
        and the scope's label selector is added where it applies.
        """
        key = self._key(resource, namespace, label_selector)
        async with self._lock:
            informer = self._informers.get(key)
            if informer is None:
                informer = Informer(
                    self.client,
                    resource,
                    key.namespace,
                    namespaces=self.scope.streams(resource, key.namespace),
                    label_selector=key.label_selector,
                    transform=self._transform,
                    logger=self.log,
                )
                self._informers[key] = informer
            if self._started:
                await informer.start()
        if self._started and wait_synced:
            await informer.wait_synced()
        return informer

    def peek(
        self, resource: Resource, namespace: str | None = None, label_selector: str | None = None
    ) -> Informer | None:
        """The informer if one was created already; never creates or starts one."""
        return self._informers.get(self._key(resource, namespace, label_selector))

    def _key(
        self, resource: Resource, namespace: str | None, label_selector: str | None
    ) -> _InformerKey:
        ns = namespace if resource.namespaced else None
        return _InformerKey(resource, ns, self.scope.selector(resource, label_selector))

    def sizes(self, cluster: str) -> builtins.list[tuple[str, str, str, int]]:
        """(cluster, group, kind, objects) of each informer: a metrics source
        (``RuntimeMetrics.add_informer_source``)."""
        return [
            (cluster, i.resource.group, i.resource.kind, len(i)) for i in self._informers.values()
        ]

    @property
    def has_synced(self) -> bool:
        return all(i.has_synced for i in self._informers.values())

    async def wait_synced(self) -> None:
        """Wait until every informer listed once (bound it with ``asyncio.timeout``)."""
        for informer in list(self._informers.values()):
            await informer.wait_synced()

    async def start(self) -> None:
        async with self._lock:
            self._started = True
            for informer in self._informers.values():
                await informer.start()

    async def stop(self) -> None:
        async with self._lock:
            self._started = False
            for informer in self._informers.values():
                await informer.stop()
