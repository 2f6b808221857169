"""What a controller remembers of its own writes stays bounded by what is alive: a soak that
creates and deletes objects for hours must not leave one entry per object ever written."""

from __future__ import annotations

from typing import Any, cast

from machinepool.runtime import (
    NODES,
    SECRETS,
    Client,
    Controller,
    EventRecorder,
    Informer,
    Obj,
    Resource,
)
from machinepool.runtime.kube.ownwrites import note_write


def obj(uid: str, rv: str, kind: str = "Secret", **meta: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"namespace": "ns", "name": uid, "uid": uid, "resourceVersion": rv, **meta},
    }


async def _nothing(_key: Any) -> None:
    return None


def test_a_deleted_object_is_forgotten() -> None:
    ctrl = Controller("c", _nothing)
    handler = ctrl.watch(Informer(cast(Client, None), SECRETS))
    with ctrl.own_writes.recording():
        note_write(obj("u1", "1"))
        note_write(obj("u2", "2"))
    assert len(ctrl.own_writes) == 2
    handler.on_delete(obj("u1", "3"))
    assert len(ctrl.own_writes) == 1
    assert not ctrl.own_writes.is_own(obj("u1", "1"))
    assert ctrl.own_writes.is_own(obj("u2", "2"))


def test_churn_leaves_nothing_behind() -> None:
    """Soak issue 26: the infrastructure process grew ~15 MiB an hour, one entry per object
    ever written. Each round writes what a pool's instance costs the Sim provider, the node
    simulator and the bootstrap controller: a watched object created and deleted (forgotten
    by its delete event), a Node or token Secret of a kind the controller does not watch (no
    event of it ever comes), and a finalizer removed last, whose delete event arrives before
    the write's answer."""
    ctrl = Controller("c", _nothing)
    handler = ctrl.watch(Informer(cast(Client, None), SECRETS))
    for i in range(200):
        with ctrl.own_writes.recording():
            note_write(obj(f"record-{i}", "1"))
            note_write(obj(f"node-{i}", "2", kind="Node"))
            note_write(obj(f"machine-{i}", "3", finalizers=["f"]))
        handler.on_delete(obj(f"record-{i}", "4"))
        handler.on_delete(obj(f"machine-{i}", "5", deletionTimestamp="2026-01-01T00:00:00Z"))
        with ctrl.own_writes.recording():  # the finalizer removal's answer, after the event
            note_write(obj(f"machine-{i}", "5", deletionTimestamp="2026-01-01T00:00:00Z"))
    assert len(ctrl.own_writes) == 0


def test_only_kinds_a_handler_watches_are_recorded() -> None:
    """Echoes of a watched kind are still told apart, whichever way the handler subscribed
    (``Controller.watch`` or ``Informer.add_handler``, as ``ClusterCache.watch`` does)."""
    ctrl = Controller("c", _nothing)
    Informer(cast(Client, None), NODES).add_handler(ctrl.handler())
    with ctrl.own_writes.recording():
        note_write(obj("n1", "7", kind="Node"))
        note_write(obj("s1", "8"))
        note_write(obj("n2", "9", kind="Node", finalizers=["f"], deletionTimestamp="t"))
    assert ctrl.own_writes.is_own(obj("n1", "7", kind="Node"))
    assert ctrl.own_writes.is_own(obj("n2", "9", kind="Node"))
    assert not ctrl.own_writes.is_own(obj("s1", "8"))
    assert len(ctrl.own_writes) == 2


class EventsApi:
    """Answers an Event create as the API server does; ``note_write`` as ``Client`` does."""

    def __init__(self) -> None:
        self.created = 0

    async def create(self, res: Resource, body: Obj, namespace: str | None = None) -> Obj:
        self.created += 1
        answer = obj(f"event-{self.created}", str(100 + self.created))
        note_write(answer)
        return answer


async def test_events_written_for_a_reconcile_are_not_its_own_writes() -> None:
    """The recorder's writer task is started by the first reconcile that records an Event and
    copies its context; what it writes later, for any controller, is no reconcile's."""
    api = EventsApi()
    recorder = EventRecorder(cast(Client, api), "c")
    ctrl = Controller("c", _nothing)
    try:
        with ctrl.own_writes.recording():
            await recorder.event(obj("pool", "1"), "Normal", "Scaled", "first")
        await recorder.event(obj("other", "1"), "Normal", "Scaled", "another controller's")
        await recorder.flush()
        assert api.created == 2
        assert len(ctrl.own_writes) == 0
    finally:
        await recorder.close()
