"""Read a reconciler's own object from the informer, never older than its own last write.

controller-runtime reconcilers read their object from the shared cache and patch a diff of
what they changed; the cache lags the server by one watch event, so a reconcile that starts
right after the previous one wrote can see the object as it was before that write. A diff
against that stale copy re-sends or, worse, undoes what the last pass just wrote. client-go
answers this with a mutation cache; ``OwnReader`` is the same idea at the size we need: it
remembers the object each write returned and serves it until the informer has caught up.

Every read is a deep copy, so a reconciler may mutate what it gets. The remembered writes are
dropped as soon as the informer holds the same or a newer resourceVersion, or the object is
gone from it, so memory stays proportional to writes in flight. etcd's resourceVersions are
integers that grow with every write; where one is not (another storage backend), the reader
cannot order the two copies and falls back to a live GET, which is always correct.

>>> reader = OwnReader(client, MACHINE_POOLS, informer)
>>> mp = await reader.get(key)          # None when gone
>>> ...
>>> reader.wrote(await patcher.patch(mp))
"""

from __future__ import annotations

from machinepool.runtime.kube.client import Client, Obj, Resource, copy_obj
from machinepool.runtime.kube.errors import NotFound
from machinepool.runtime.kube.informer import Informer
from machinepool.runtime.kube.keys import ObjectKey


def _version(obj: Obj) -> int | None:
    try:
        return int(str((obj.get("metadata") or {}).get("resourceVersion", "")))
    except ValueError:
        return None


def cache_caught_up(cached: Obj, own: Obj) -> bool | None:
    """Whether the informer's copy is as new as our own write of it; ``None`` when the two
    cannot be ordered (resourceVersions that are not etcd's integers)."""
    cached_version, own_version = _version(cached), _version(own)
    if cached_version is None or own_version is None:
        return None
    return cached_version >= own_version


class OwnReader:
    """The informer's copy of an object, or this reconciler's newer write of it."""

    def __init__(self, client: Client, resource: Resource, informer: Informer) -> None:
        self.client = client
        """The live GET when the informer's copy cannot be ordered; ``runtime.drive`` writes
        the object through it too."""
        self.resource = resource
        """The kind read (and written by ``runtime.drive``)."""
        self._informer = informer
        self._written: dict[ObjectKey, Obj] = {}

    def __len__(self) -> int:
        """Writes remembered because the informer has not seen them yet."""
        return len(self._written)

    def wrote(self, obj: Obj) -> None:
        """Remember what the server answered to a write of the object."""
        self._written[ObjectKey.of(obj)] = copy_obj(obj)

    async def get(self, key: ObjectKey) -> Obj | None:
        """A private copy of the newest known state of ``key``; ``None`` when it is gone.

        Gone means gone from the informer: an object we wrote and the informer has not seen
        created yet is not something a reconciler of this kind ever makes, so it is not kept.
        """
        cached = self._informer.get_key(key)
        if cached is None:
            self._written.pop(key, None)
            return None
        own = self._written.get(key)
        if own is None:
            return copy_obj(cached)
        caught_up = cache_caught_up(cached, own)
        if caught_up is None:
            self._written.pop(key, None)
            return await self._live(key)
        if caught_up:
            del self._written[key]
            return copy_obj(cached)
        return copy_obj(own)

    async def _live(self, key: ObjectKey) -> Obj | None:
        try:
            return await self.client.get(self.resource, key.name, key.namespace)
        except NotFound:
            return None
