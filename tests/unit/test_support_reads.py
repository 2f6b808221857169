"""The read recorder the filter tests stand on: it sees what views and ``dig`` read, copies
of it are plain, and ``unnoticed`` finds the field a filter leaves out."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
from collections.abc import Iterator
from typing import Any

from tests.support.reads import Recorded, leaves, recording, unnoticed

from machinepool.api.meta import dig
from machinepool.api.views import MachinePoolView
from machinepool.runtime import ObjectKey, copy_obj


class _OneObject:
    """The smallest informer-like store ``recording`` reaches into."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self._store = {ObjectKey("ns", "p"): obj}


@contextlib.contextmanager
def recording_of(obj: dict[str, Any]) -> Iterator[tuple[dict[str, Any], set[tuple[str, ...]]]]:
    store = _OneObject(obj)
    with recording(store, ObjectKey("ns", "p")) as reads:  # type: ignore[arg-type]
        yield store._store[ObjectKey("ns", "p")], reads


POOL: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}},
    "spec": {"replicas": 2, "template": {"spec": {"version": "v1.34.4"}}},
    "status": {"nodeRefs": [{"name": "n1"}]},
}


def test_views_and_dig_reads_are_recorded_as_their_fields() -> None:
    reads: set[tuple[str, ...]] = set()
    obj = Recorded(POOL, (), reads)
    view = MachinePoolView(obj)
    assert view.spec.template.spec.version == "v1.34.4"
    assert view.status.node_refs == [{"name": "n1"}]
    assert dig(obj, "spec", "clusterName") is None  # absent: still a read
    assert leaves(reads) == {
        ("spec", "template", "spec", "version"),
        ("status", "nodeRefs"),
        ("spec", "clusterName"),
    }


def test_a_dict_taken_whole_is_read_whole() -> None:
    reads: set[tuple[str, ...]] = set()
    obj = Recorded(POOL, (), reads)
    labels = MachinePoolView(obj).metadata.labels
    assert dict(labels.items()) == {"a": "b"}  # iterating what was read reads nothing more
    assert leaves(reads) == {("metadata", "labels")}


def test_copies_made_while_recording_record_into_the_same_set() -> None:
    with recording_of(POOL) as (obj, reads):
        for copied in (copy_obj(obj), copy.deepcopy(obj)):
            assert copied == POOL
            assert MachinePoolView(copied).spec.replicas == 2
    assert leaves(reads) == {("spec", "replicas")}
    assert type(copy_obj(obj)) is dict  # once the recording is over, copies are plain


def test_conditions_are_read_by_type() -> None:
    pool = {"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X"}]}}
    reads: set[tuple[str, ...]] = set()
    conditions = MachinePoolView(Recorded(pool, (), reads)).status.conditions or []
    assert [c.get("status") for c in conditions if c.get("type") == "Ready"] == ["True"]
    assert leaves(reads) == {
        ("status", "conditions", "[Ready]", "type"),
        ("status", "conditions", "[Ready]", "status"),
    }  # X's type was read only to pass it by

    def ready(obj: dict[str, Any]) -> object:
        listed = dig(obj, "status", "conditions") or []
        return [c.get("status") for c in listed if c.get("type") == "Ready"]

    assert unnoticed(ready, pool, reads) == set()
    assert unnoticed(lambda obj: None, pool, reads) == {
        ("status", "conditions", "[Ready]", "type"),
        ("status", "conditions", "[Ready]", "status"),
    }


async def test_only_the_recording_task_and_its_children_are_recorded() -> None:
    with recording_of(POOL) as (obj, reads):

        async def reconcile() -> None:
            assert MachinePoolView(obj).spec.replicas == 2

        async def elsewhere() -> None:
            assert MachinePoolView(obj).spec.cluster_name is None

        other = asyncio.get_running_loop().create_task(elsewhere(), context=contextvars.Context())
        await asyncio.gather(reconcile(), other)
    assert leaves(reads) == {("spec", "replicas")}


def test_unnoticed_names_the_field_a_filter_leaves_out() -> None:
    reads = {("spec", "template", "spec", "version"), ("status", "nodeRefs"), ("metadata", "name")}

    def without_version(obj: dict[str, object]) -> object:
        return bool(dig(obj, "status", "nodeRefs"))

    def with_version(obj: dict[str, object]) -> object:
        version = dig(obj, "spec", "template", "spec", "version")
        return version, bool(dig(obj, "status", "nodeRefs"))

    assert unnoticed(without_version, POOL, reads) == {("spec", "template", "spec", "version")}
    assert unnoticed(with_version, POOL, reads) == set()  # and the name is identity
    exempt = {("spec", "template"): "because"}
    assert unnoticed(without_version, POOL, reads, exempt=exempt) == set()
