"""Which adds an informer marks as initial: a stream's first list and the replay to a handler
added later, never a watch event nor a re-list after 410 (it reports only what changed while
the watch was down). Controllers queue initial adds at low priority."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from machinepool.runtime import (
    CONFIGMAPS,
    Client,
    Gone,
    Informer,
    Obj,
    ObjectList,
    Resource,
    WatchEvent,
)


def cm(name: str, rv: str) -> Obj:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


class ScriptedApi:
    """Just enough of ``Client`` for an informer: lists and watch streams played in turn;
    once the watches run out, a watch that never delivers."""

    def __init__(self, lists: list[list[Obj]], watches: list[list[WatchEvent | Gone]]) -> None:
        self.lists = lists
        self.watches = watches
        self.idle = asyncio.Event()

    async def list(self, res: Resource, namespace: str | None = None, **kw: Any) -> ObjectList:
        return ObjectList(items=[dict(o) for o in self.lists.pop(0)], resource_version="1")

    def watch(self, res: Resource, namespace: str | None = None, **kw: Any) -> Any:
        script = self.watches.pop(0) if self.watches else None

        async def stream() -> AsyncIterator[WatchEvent]:
            if script is None:
                self.idle.set()
                await asyncio.Event().wait()
            for step in script or []:
                if isinstance(step, Gone):
                    raise step
                yield step

        return stream()


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def on_add(self, obj: Obj, initial: bool = False) -> None:
        self.calls.append(("listed" if initial else "added", obj["metadata"]["name"]))

    def on_update(self, old: Obj, new: Obj) -> None:
        self.calls.append(("updated", new["metadata"]["name"]))

    def on_delete(self, obj: Obj) -> None:
        self.calls.append(("deleted", obj["metadata"]["name"]))


async def played(api: ScriptedApi) -> tuple[Informer, Recorder]:
    """An informer over ``api`` with a ``Recorder`` subscribed before it starts, run until
    the script is played out, then stopped."""
    informer = Informer(cast(Client, api), CONFIGMAPS, "ns")
    handler = Recorder()
    informer.add_handler(handler)
    await informer.start()
    try:
        async with asyncio.timeout(10):
            await api.idle.wait()
    finally:
        await informer.stop()
    return informer, handler


async def test_only_the_first_list_and_a_replay_are_initial() -> None:
    api = ScriptedApi(
        lists=[
            [cm("a", "1"), cm("b", "1")],
            [cm("a", "1"), cm("b", "5"), cm("d", "6")],  # after 410: c went, b changed, d came
        ],
        watches=[[WatchEvent("ADDED", cm("c", "2")), Gone(410, "Expired", "too old")]],
    )
    informer, early = await played(api)
    assert sorted(early.calls[:2]) == [("listed", "a"), ("listed", "b")]  # in random order
    assert early.calls[2:] == [
        ("added", "c"),
        ("deleted", "c"),
        ("updated", "b"),
        ("added", "d"),
    ]
    late = Recorder()
    informer.add_handler(late)
    assert sorted(late.calls) == [("listed", "a"), ("listed", "b"), ("listed", "d")]


async def _first_listed(names: list[str]) -> str:
    _, handler = await played(ScriptedApi(lists=[[cm(n, "1") for n in names]], watches=[]))
    assert sorted(name for _, name in handler.calls) == sorted(names)
    return handler.calls[0][1]


async def test_the_first_list_is_handed_out_in_random_order() -> None:
    """The API server lists by name; a controller killed before it gets through its backlog
    would serve the same objects first on every start, and the last ones never."""
    names = [f"cm-{i:02}" for i in range(10)]
    firsts = {await _first_listed(names) for _ in range(10)}
    assert len(firsts) >= 3, firsts
