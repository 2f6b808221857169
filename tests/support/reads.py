"""What a reconcile reads from an object, and whether an event filter would see it change.

An event filter (a watch's ``inputs``, ``PoolEvents``) or a skip-if-unchanged cache is right
only while it names every field its reconcile reads. These helpers check that against the
reconcile itself, not against a list someone keeps by hand:

1. ``recording(informer, key)`` puts a ``Recorded`` copy of a stored object in the informer's
   place and yields the set of paths read from it, while the test runs a real reconcile.
2. ``unnoticed(inputs, obj, reads)`` changes each field read, one at a time, and returns those
   whose change ``inputs`` does not notice: the updates the filter would drop although the
   reconcile would read something new.

Reads are recorded through ``get``, ``[]`` and ``in``, which is how ``meta.dig``, the typed
views and the contract accessors read, also from the reconciler's own copies of the object.
A path that is only walked through (``spec`` on the way to ``spec.replicas``) is not a read
of its own; a list is read whole.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from machinepool.runtime import Informer, Obj, ObjectKey

Path = tuple[str, ...]

IDENTITY: frozenset[Path] = frozenset(
    {
        ("apiVersion",),
        ("kind",),
        ("metadata", "name"),
        ("metadata", "namespace"),
        ("metadata", "uid"),
        ("metadata", "resourceVersion"),
        ("metadata", "generation"),
        ("metadata", "creationTimestamp"),
        ("metadata", "managedFields"),
    }
)
"""What an update of the same object never changes, or changes only with the spec (the
generation): reading it needs no event."""


CONDITIONS = "conditions"
"""A list read by type: each condition's fields are recorded under ``[<its type>]``, so a
filter is held to the condition types a reconcile reads (a read of the list that looks at no
condition, the list being empty, is a read of the list). An absent list is changed into one
that holds a Ready condition, the type a reader of another object's conditions looks for."""


def _by_type(condition: Mapping[str, Any]) -> str:
    return f"[{dict.get(condition, 'type')}]"  # type: ignore[arg-type]


_RECORDING: dict[int, set[Path]] = {}
"""The read sets of the recordings under way, by id, so that a copy of a recorded object
(a pickle round trip: ``copy_obj``) records into its original's set."""
_ACTIVE: ContextVar[frozenset[int]] = ContextVar("machinepool_tests_reads", default=frozenset())
"""The recordings whose reads count in this task: those the task entered, and inherited by
the tasks it starts. Another controller's reconcile or an event handler reading the same
informer in the meantime is not the reconcile under test."""


def _revive(data: dict[str, Any], path: Path, token: int) -> dict[str, Any]:
    reads = _RECORDING.get(token)
    return Recorded(data, path, reads) if reads is not None else data


class Recorded(dict[str, Any]):
    """A dict that notes into ``reads`` the path of every key read from it (``get``, ``[]``,
    ``in``); the dicts under it come back recorded, lists are read whole. Iterating it
    (``items``, ``keys``) records nothing: a view's field read records its path, and what the
    caller does with the value it got is part of that read, while a diff of the whole object
    (``runtime.kube.patch``) reads nothing a reconcile decides on. Copies (``copy_obj``,
    ``copy.deepcopy``) made while a ``recording`` is under way record into the same set: a
    reconciler reads its own copy of its object."""

    def __init__(self, data: Mapping[str, Any], path: Path, reads: set[Path]) -> None:
        super().__init__(data)
        self._path = path
        self._reads = reads

    def _note(self, path: Path) -> None:
        reads = self._reads
        if id(reads) not in _RECORDING or id(reads) in _ACTIVE.get():
            reads.add(path)

    def _wrap(self, key: str, value: Any) -> Any:
        path = (*self._path, key)
        self._note(path)
        if isinstance(value, dict) and not isinstance(value, Recorded):
            return Recorded(value, path, self._reads)
        if key == CONDITIONS and isinstance(value, list):
            return [
                Recorded(item, (*path, _by_type(item)), self._reads)
                if isinstance(item, dict) and not isinstance(item, Recorded)
                else item
                for item in value
            ]
        return value  # another list is read whole: its items are not told apart

    def __getitem__(self, key: str) -> Any:
        return self._wrap(key, super().__getitem__(key))

    def get(self, key: str, default: Any = None) -> Any:
        if key not in self.keys():
            self._note((*self._path, key))
            return default
        return self._wrap(key, super().__getitem__(key))

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self._note((*self._path, key))
        return super().__contains__(key)

    def __reduce__(self) -> Any:
        return (_revive, (dict(dict.items(self)), self._path, id(self._reads)))

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        data = {k: copy.deepcopy(v, memo) for k, v in dict.items(self)}
        return _revive(data, self._path, id(self._reads))


def leaves(reads: Iterable[Path]) -> set[Path]:
    """The paths read for their value: not those only walked through on the way to another,
    nor the type of a condition read only to pass it by in a search for another type."""
    found = set(reads)
    walked = {p[:i] for p in found for i in range(1, len(p))}
    fields = {p for p in found if p not in walked}
    looked_into = {p[:-1] for p in fields if len(p) > 1 and p[-1] != "type"}
    return {
        p
        for p in fields
        if not (len(p) > 1 and p[-1] == "type" and p[-2].startswith("[")) or p[:-1] in looked_into
    }


@contextlib.contextmanager
def recording(informer: Informer, key: ObjectKey) -> Iterator[set[Path]]:
    """While the block runs, ``informer`` serves a ``Recorded`` copy of the object at
    ``key``; yields the set of paths read from it (``leaves`` of it are the fields) by this
    task and the tasks it starts, not by the other tasks of the process.

    It reaches into the informer's store: the one place every reader of the cache goes
    through (``get``, ``list``, ``by_index``), so nothing in the code under test changes.
    """
    store: dict[ObjectKey, Obj] = informer._store
    original = store[key]
    reads: set[Path] = set()
    _RECORDING[id(reads)] = reads
    active = _ACTIVE.set(_ACTIVE.get() | {id(reads)})
    store[key] = Recorded(original, (), reads)
    try:
        yield reads
    finally:
        _ACTIVE.reset(active)
        del _RECORDING[id(reads)]
        if isinstance(store.get(key), Recorded):
            store[key] = original


def _toggled(value: Any) -> Any:
    """A value unlike ``value`` in the ways a reconcile tests it: present or absent, empty
    or not, true or false, equal or not."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "-changed"
    if isinstance(value, list):
        return [] if value else [{"name": "changed"}]
    if isinstance(value, dict):
        return {} if value else {"changed": "changed"}
    return "changed"


def changed_at(obj: Obj, path: Path) -> Obj:
    """A deep copy of ``obj`` with the field at ``path`` changed (``_toggled``), or removed
    when it holds something truthy of a kind with an empty form, so both "set" and "unset"
    are tried across the fields."""
    new: Obj = copy.deepcopy(dict(obj))
    node: Any = new
    for part in path[:-1]:
        if isinstance(node, list):  # a condition, by type (see ``CONDITIONS``)
            node = next(c for c in node if isinstance(c, dict) and _by_type(c) == part)
            continue
        child = node.get(part)
        if not isinstance(child, dict | list):
            child = node[part] = {}
        node = child
    leaf = path[-1]
    if isinstance(node, list):  # the condition itself: gone
        node[:] = [c for c in node if not (isinstance(c, dict) and _by_type(c) == leaf)]
        return new
    value = node.get(leaf)
    if isinstance(value, list | dict | str) and value:
        del node[leaf]
    elif leaf == CONDITIONS:
        node[leaf] = [{"type": "Ready", "status": "False", "reason": "Changed"}]
    else:
        node[leaf] = _toggled(value)
    return new


def unnoticed(
    inputs: Callable[[Obj], object],
    obj: Obj,
    reads: Iterable[Path],
    *,
    exempt: Mapping[Path, str] | None = None,
) -> set[Path]:
    """The fields read (``leaves`` of ``reads``) whose change ``inputs`` does not notice.

    ``exempt`` names fields a filter may leave out on purpose, each with why (written only
    by the reconciler itself, say); ``IDENTITY`` is always exempt.
    """
    skip = set(IDENTITY) | set(exempt or {})
    plain: Obj = copy.deepcopy(dict(obj))
    before = inputs(plain)
    missed = set()
    for path in leaves(reads):
        if path in skip or any(path[: len(s)] == s for s in skip):
            continue
        if inputs(changed_at(plain, path)) == before:
            missed.add(path)
    return missed
