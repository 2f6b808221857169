"""What a controller remembers of its own writes stays bounded by what is alive: a soak that
creates and deletes objects for hours must not leave one entry per object ever written."""

from __future__ import annotations

from typing import Any, cast

from machinepool.runtime import Client, Controller, EventRecorder, Obj, Resource
from machinepool.runtime.ownwrites import note_write


def obj(uid: str, rv: str) -> Obj:
    return {"metadata": {"namespace": "ns", "name": uid, "uid": uid, "resourceVersion": rv}}


async def _nothing(_key: Any) -> None:
    return None


def test_a_deleted_object_is_forgotten() -> None:
    ctrl = Controller("c", _nothing)
    handler = ctrl.handler()
    with ctrl.own_writes.recording():
        note_write(obj("u1", "1"))
        note_write(obj("u2", "2"))
    assert len(ctrl.own_writes) == 2
    handler.on_delete(obj("u1", "3"))
    assert len(ctrl.own_writes) == 1
    assert not ctrl.own_writes.is_own(obj("u1", "1"))
    assert ctrl.own_writes.is_own(obj("u2", "2"))


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
