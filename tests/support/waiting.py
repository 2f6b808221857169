"""Waiting for a condition without a fixed sleep standing in for it.

Three shapes, one of each:

- ``eventually(check)``: polls a check (sync or async) of state the test cannot subscribe to.
- ``Changes``: a mixin for harnesses whose informers poke it; ``until(check, what)`` re-checks on
  every watched change instead of on a timer.
- ``watch_until`` / ``wait_for``: follow a real watch of the API (a collection, or one object)
  until a predicate holds; ``until_admission_answers``: until a just-registered webhook is called.

Each fails with a ``TimeoutError`` (``AssertionError`` for ``Changes.until``, which harness
tests assert on) that names what was awaited.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from machinepool.runtime import (
    ApiError,
    Client,
    FuncHandler,
    Gone,
    Informer,
    Obj,
    Resource,
)

T = TypeVar("T")

GENEROUS = 120.0
"""Seconds: long enough for two busy cores, short enough to fail a stuck test."""


def _named(check: Callable[..., Any], what: str) -> str:
    """``what``, or failing that where ``check`` was written: a lambda's name says nothing."""
    if what:
        return what
    code = getattr(check, "__code__", None)
    name = getattr(check, "__qualname__", repr(check))
    if code is None:
        return name
    return f"{name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"


async def eventually(
    check: Callable[[], T | Awaitable[T]],
    what: str = "",
    *,
    within: float = GENEROUS,
    interval: float = 0.1,
) -> T:
    """Await ``check()`` (sync or async) until it returns something truthy, and return it.

    >>> await eventually(lambda: informer.get("c", ns), "ConfigMap c in the cache")

    ``TimeoutError`` after ``within`` seconds, naming ``what`` (or where ``check`` is written).
    """
    try:
        async with asyncio.timeout(within):
            while True:
                value = check()
                if asyncio.iscoroutine(value):
                    value = await value
                if value:
                    return value  # type: ignore[return-value]
                await asyncio.sleep(interval)
    except TimeoutError:
        raise TimeoutError(
            f"timed out after {within:.0f}s waiting for {_named(check, what)}"
        ) from None


@dataclass(kw_only=True)
class Changes:
    """Mixin for a harness that watches the world through informers: those it ``follow``s
    wake ``until``, which re-checks on each change (and each second, since clocks and requeues
    move without events). ``patience`` is the harness's default bound."""

    patience: ClassVar[float] = GENEROUS
    _changed: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)

    def changed(self, *_: object) -> None:
        """Wake the waiters (a handler for any informer event)."""
        self._changed.set()

    def follow(self, informer: Informer) -> Informer:
        """Wake the waiters on every event of ``informer``; return it."""
        informer.add_handler(FuncHandler(self.changed, self.changed, self.changed))
        return informer

    async def until(self, check: Callable[[], bool], what: str, timeout: float = 0.0) -> None:
        """Return once ``check()`` holds; ``AssertionError`` naming ``what`` after ``timeout``
        seconds (``patience`` unless given)."""
        timeout = timeout or self.patience
        try:
            async with asyncio.timeout(timeout):
                while not check():
                    self._changed.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(1.0):
                            await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for: {what}") from None

    async def _changes(self, window: float) -> AsyncIterator[None]:
        """Yield on each watched change until ``window`` seconds have passed."""
        loop = asyncio.get_running_loop()
        end = loop.time() + window
        while True:
            self._changed.clear()
            try:
                async with asyncio.timeout(max(0.0, end - loop.time())):
                    await self._changed.wait()
            except TimeoutError:
                return
            yield

    async def unchanged(self, observe: Callable[[], object], what: str, window: float) -> None:
        """Fail as soon as ``observe()`` differs from its value now, re-read on every watched
        change over ``window`` seconds: "nothing happens" checked on the events themselves,
        e.g. ``await system.unchanged(lambda: len(system.machines("p")), "no new Machine", 5)``.
        """
        before = observe()
        async for _ in self._changes(window):
            if (now := observe()) != before:
                raise AssertionError(f"{what}: {before!r} became {now!r}")

    async def settled(
        self, observe: Callable[[], object], what: str, quiet: float, timeout: float = 0.0
    ) -> None:
        """Wait until ``observe()`` has kept one value for ``quiet`` seconds of watched events;
        fail if it never does within ``timeout`` (a system that keeps rewriting never settles)."""
        timeout = timeout or self.patience
        try:
            async with asyncio.timeout(timeout):
                while True:
                    try:
                        await self.unchanged(observe, what, quiet)
                        return
                    except AssertionError:
                        continue
        except TimeoutError:
            raise AssertionError(f"never settled for {quiet}s: {what}") from None


async def watch_until(
    client: Client,
    res: Resource,
    namespace: str | None,
    done: Callable[[dict[str, Obj]], bool],
    what: str,
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
    within: float = GENEROUS,
    on_event: Callable[[], None] | None = None,
) -> dict[str, Obj]:
    """Follow ``res`` until ``done(objects by name)`` holds; return those objects.

    Lists once, then follows the watch (re-listing when it ends or expires), so the wait ends
    as soon as the state is reached rather than on a poll tick. ``on_event`` runs on every
    event (a harness raises from it when a process it depends on died). ``TimeoutError``
    naming ``what`` after ``within`` seconds.
    """
    selectors: dict[str, Any] = {"label_selector": label_selector, "field_selector": field_selector}

    async def follow() -> dict[str, Obj]:
        while True:
            listed = await client.list(res, namespace, **selectors)
            objects = {o["metadata"]["name"]: o for o in listed.items}
            if done(objects):
                return objects
            with contextlib.suppress(Gone):
                async for event in client.watch(
                    res,
                    namespace,
                    resource_version=listed.resource_version,
                    timeout_seconds=30,
                    **selectors,
                ):
                    if on_event is not None:
                        on_event()
                    if event.type == "BOOKMARK":
                        continue
                    name = event.object.get("metadata", {}).get("name", "")
                    if event.type == "DELETED":
                        objects.pop(name, None)
                    else:
                        objects[name] = event.object
                    if done(objects):
                        return objects

    try:
        async with asyncio.timeout(within):
            return await follow()
    except TimeoutError:
        raise TimeoutError(f"timed out after {within:.0f}s waiting for {res.kind} {what}") from None


async def wait_for(
    client: Client,
    res: Resource,
    namespace: str | None,
    name: str,
    predicate: Callable[[Obj | None], bool],
    *,
    within: float = GENEROUS,
    what: str = "",
) -> Obj | None:
    """Watch one object until ``predicate(obj)`` holds (``obj`` is ``None`` while it does not
    exist), and return it; ``TimeoutError`` naming the object and ``what`` after ``within``."""
    objects = await watch_until(
        client,
        res,
        namespace,
        lambda objs: predicate(objs.get(name)),
        f"{namespace}/{name}: {_named(predicate, what)}",
        field_selector=f"metadata.name={name}",
        within=within,
    )
    return objects.get(name)


async def until_admission_answers(
    client: Client,
    res: Resource,
    probe: Obj,
    namespace: str | None = None,
    *,
    within: float = 60.0,
) -> str:
    """Dry-run create ``probe`` (which a webhook should refuse) until a webhook refuses it, and
    return the refusal message.

    The apiserver reads webhook configurations through its own informer, so for a moment after
    one is written, a create is still admitted without a call: a test that registers and then
    expects a refusal must wait for this first.
    """

    async def refusal() -> str:
        try:
            await client.create(res, probe, namespace, dry_run=True)
        except ApiError as err:
            if "admission webhook" in err.message:
                return err.message
        return ""

    name = probe["metadata"]["name"]
    return await eventually(
        refusal, f"a webhook to refuse {res.kind} {name}", within=within, interval=0.2
    )
