"""The reconcile skeleton: how phases run, how their errors are noted and raised, the one
patch on exit, and the driver that runs a kind's steps
(``machinepool.runtime.reconcile.phases``)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from machinepool.runtime import (
    Client,
    Conflict,
    NotFound,
    ObjectKey,
    Outcome,
    OwnReader,
    Patcher,
    Phase,
    Resource,
    Result,
    Steps,
    Stop,
    TerminalError,
    Then,
    describe_error,
    drive,
    patch_on_exit,
    run_phases,
)

POOLS = Resource("example.io", "v1", "pools", "Pool")


@dataclass
class Scope:
    ran: list[str] = field(default_factory=list)


async def find_nodes(scope: Scope) -> Result:
    """Read the workload cluster's Nodes.

    Anything after the first paragraph is detail, not purpose."""
    scope.ran.append("find_nodes")
    raise ConnectionRefusedError(111, "Connection refused")


async def drain(scope: Scope) -> Result:
    """Drain the Node."""
    scope.ran.append("drain")
    raise ConnectionRefusedError(111, "Connection refused")


async def soon(scope: Scope) -> Result:
    scope.ran.append("soon")
    return Result(requeue_after=5)


async def later(scope: Scope) -> Result:
    scope.ran.append("later")
    return Result(requeue_after=30)


async def stop(scope: Scope) -> Result:
    scope.ran.append("stop")
    return Stop()


def conflict() -> Conflict:
    return Conflict(409, "Conflict", "the object has been modified")


def problem() -> TerminalError:
    return TerminalError("configRef names nothing")


async def test_each_error_names_the_phase_and_its_purpose_in_the_log_line() -> None:
    outcome = await run_phases(Scope(), [find_nodes, drain])
    first, second = (describe_error(e) for e in outcome.errors)
    assert "phase find_nodes: Read the workload cluster's Nodes" in first
    assert "detail" not in first
    assert "phase drain: Drain the Node" in second
    assert isinstance(outcome.errors[0], ConnectionRefusedError)  # noted, not wrapped


async def test_independent_phases_all_run_and_a_chain_stops_at_the_first_failure() -> None:
    independent = Scope()
    outcome = await run_phases(independent, [find_nodes, drain, soon])
    assert independent.ran == ["find_nodes", "drain", "soon"]
    assert len(outcome.errors) == 2
    chained = Scope()
    outcome = await run_phases(chained, [find_nodes, drain, soon], chain=True)
    assert chained.ran == ["find_nodes"]
    assert len(outcome.errors) == 1


async def test_a_phase_that_returns_stop_ends_the_run_chained_or_not() -> None:
    for chain in (False, True):
        scope = Scope()
        outcome = await run_phases(scope, [soon, stop, later], chain=chain)
        assert scope.ran == ["soon", "stop"]
        assert outcome.ok
        assert outcome.stop == Stop()
        assert outcome.then is Then.REPORT
        assert outcome.result == Result(requeue_after=5)


async def test_the_soonest_requeue_wins_across_phases_and_runs() -> None:
    outcome = await run_phases(Scope(), [later, stop])
    assert outcome.result == Result(requeue_after=30)
    outcome += await run_phases(Scope(), [soon])
    assert outcome.result == Result(requeue_after=5)
    assert outcome.settle("Pool ns/a") == Result(requeue_after=5)
    assert (await run_phases(Scope(), [stop])).result == Result()


def test_one_error_is_raised_as_itself() -> None:
    error = KeyError("spec")
    with pytest.raises(KeyError) as raised:
        Outcome(errors=[error]).settle("Pool ns/a")
    assert raised.value is error


def test_lost_locks_alone_raise_conflict_so_the_retry_is_quiet() -> None:
    with pytest.raises(Conflict):
        Outcome(errors=[conflict(), conflict()]).settle("Pool ns/a")
    # A problem no retry fixes is met again by the retry the Conflict brings.
    with pytest.raises(Conflict):
        Outcome(errors=[problem(), conflict()]).settle("Pool ns/a")


def test_only_terminal_errors_raise_one_terminal_error_naming_the_object() -> None:
    with pytest.raises(TerminalError, match="Pool ns/a: TerminalError: configRef") as raised:
        Outcome(errors=[problem(), problem()]).settle("Pool ns/a")
    assert not isinstance(raised.value, BaseExceptionGroup)


def test_anything_else_raises_a_group_naming_the_object() -> None:
    errors: list[Exception] = [conflict(), KeyError("spec"), problem()]
    with pytest.raises(ExceptionGroup) as raised:
        Outcome(errors=errors).settle("Pool ns/a")
    assert raised.value.message == "Pool ns/a"
    assert list(raised.value.exceptions) == errors


class FakeClient:
    """Answers patches like an API server with ``stored`` as the object; ``refuse`` is raised
    by the next patch of the subresource it names ("" for the main resource)."""

    def __init__(self, stored: dict[str, Any], refuse: dict[str, Exception] | None = None):
        self.stored = stored
        self.refuse = dict(refuse or {})
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def patch(
        self, resource: Resource, name: str, body: Any, namespace: str | None = None, **kw: Any
    ) -> dict[str, Any]:
        subresource = str(kw.get("subresource") or "")
        self.patches.append((subresource, copy.deepcopy(body)))
        if subresource in self.refuse:
            raise self.refuse.pop(subresource)
        for key, value in body.items():
            if key != "metadata":
                self.stored[key] = copy.deepcopy(value)
        return copy.deepcopy(self.stored)

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Any:
        return copy.deepcopy(self.stored)


def pool(**metadata: Any) -> dict[str, Any]:
    meta = {"name": "a", "namespace": "ns", "generation": 3, "resourceVersion": "1", **metadata}
    return {"metadata": meta, "spec": {}, "status": {"observedGeneration": 2}}


def patcher_for(client: FakeClient, obj: dict[str, Any]) -> Patcher:
    return Patcher(cast(Client, client), POOLS, obj)


async def test_the_status_claims_the_generation_only_when_every_phase_succeeded() -> None:
    for outcome, observed in ((Outcome(), 3), (Outcome(errors=[KeyError("x")]), 2)):
        obj = pool()
        client = FakeClient(copy.deepcopy(obj))
        patcher = patcher_for(client, obj)
        await patch_on_exit(patcher, obj, outcome)
        assert client.stored["status"]["observedGeneration"] == observed
    obj = pool()
    client = FakeClient(copy.deepcopy(obj))
    await patch_on_exit(patcher_for(client, obj), obj, Outcome(), observed=False)
    assert client.patches == []
    await patch_on_exit(patcher_for(client, obj), obj)  # an early exit claims nothing
    assert client.patches == []


async def test_a_failed_write_joins_the_phases_errors_instead_of_hiding_them() -> None:
    obj = pool()
    client = FakeClient(copy.deepcopy(obj), {"status": conflict()})
    patcher = Patcher(cast(Client, client), POOLS, obj, rebase=False)
    outcome = Outcome(errors=[KeyError("x")])
    obj["status"]["phase"] = "Running"
    await patch_on_exit(patcher, obj, outcome)
    assert [type(e) for e in outcome.errors] == [KeyError, Conflict]
    with pytest.raises(ExceptionGroup):
        outcome.settle("Pool ns/a")
    # Without an outcome, as before any phase ran, the failure is raised.
    client.refuse["status"] = conflict()
    with pytest.raises(Conflict):
        await patch_on_exit(patcher, obj)


async def test_a_deleted_object_already_gone_is_no_failure_and_a_live_one_is() -> None:
    gone = NotFound(404, "NotFound", "pools a not found")
    obj = pool(deletionTimestamp="2026-01-01T00:00:00Z")
    client = FakeClient(copy.deepcopy(obj), {"status": gone})
    patcher = patcher_for(client, obj)
    obj["status"]["phase"] = "Deleting"
    outcome = Outcome()
    assert await patch_on_exit(patcher, obj, outcome) is obj
    assert outcome.ok
    assert client.patches  # it was sent, and the 404 was the answer
    obj = pool()
    client = FakeClient(copy.deepcopy(obj), {"status": gone})
    patcher = patcher_for(client, obj)
    obj["status"]["phase"] = "Running"
    with pytest.raises(NotFound):
        await patch_on_exit(patcher, obj)


async def test_a_status_write_that_lost_its_lock_keeps_the_other_writers_conditions() -> None:
    """Not a whole reconcile again: the write is rebased onto a fresh read, keeping the
    condition another controller added meanwhile and ours."""
    obj = pool()
    theirs = copy.deepcopy(obj)
    theirs["metadata"]["resourceVersion"] = "2"
    theirs["status"]["conditions"] = [{"type": "HealthCheckSucceeded", "status": "False"}]
    client = FakeClient(theirs, {"status": conflict()})
    patcher = patcher_for(client, obj)
    obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    outcome = Outcome()
    await patch_on_exit(patcher, obj, outcome)
    assert outcome.ok
    assert [c["type"] for c in client.stored["status"]["conditions"]] == [
        "HealthCheckSucceeded",
        "Ready",
    ]
    assert client.stored["status"]["observedGeneration"] == 3


class Reader:
    """What ``drive`` reads through: the object as stored, a private copy each time."""

    resource = POOLS

    def __init__(self, client: FakeClient, gone: bool = False) -> None:
        self.client, self.gone = client, gone

    async def get(self, key: ObjectKey) -> dict[str, Any] | None:
        return None if self.gone else copy.deepcopy(self.client.stored)

    def wrote(self, obj: dict[str, Any]) -> None:
        """Nothing to note: ``get`` always reads the store, never a cache behind it."""


@dataclass
class PoolPass:
    obj: dict[str, Any]
    ran: list[str] = field(default_factory=list)


class PoolSteps(Steps[PoolPass]):
    """A kind whose guard adds a finalizer, whose phases are given, and whose report writes
    a phase: enough to see what the driver does on each exit."""

    kind = "Pool"

    def __init__(self, *phases: Phase[PoolPass], hold: float = 0.0) -> None:
        self._phases = phases
        self._hold = hold
        self.forgotten: list[ObjectKey] = []
        self.reported = 0

    def forget(self, key: ObjectKey) -> None:
        self.forgotten.append(key)

    def scope(self, key: ObjectKey, obj: dict[str, Any], patcher: Patcher) -> PoolPass | Stop:
        return PoolPass(obj)

    def guards(self, scope: PoolPass) -> Sequence[Phase[PoolPass]]:
        return (add_finalizer,)

    def phases(self, scope: PoolPass) -> Sequence[Phase[PoolPass]]:
        return self._phases

    async def report(self, scope: PoolPass, outcome: Outcome) -> Outcome:
        self.reported += 1
        scope.obj["status"]["phase"] = "Failed" if outcome.errors else "Running"
        return Outcome()

    def hold(self, scope: PoolPass, before: dict[str, Any], after: dict[str, Any]) -> float:
        return self._hold


async def add_finalizer(scope: PoolPass) -> Result:
    """Add the finalizer."""
    finalizers = scope.obj["metadata"].setdefault("finalizers", [])
    if "ours" in finalizers:
        return Result()
    finalizers.append("ours")
    return Stop(then=Then.WRITE)


async def quiet(scope: PoolPass) -> Result:
    scope.ran.append("quiet")
    return Stop(requeue_after=2, then=Then.NOTHING)


async def failing(scope: PoolPass) -> Result:
    """Fail."""
    raise KeyError("spec")


KEY = ObjectKey("ns", "a")


async def run(steps: PoolSteps, client: FakeClient, reader: Reader | None = None) -> Result:
    steps.reader = cast(OwnReader, reader or Reader(client))
    return await drive(steps, KEY)


async def test_a_guard_that_stops_writes_its_change_alone_and_claims_no_generation() -> None:
    client = FakeClient(pool())
    steps = PoolSteps(soon)
    assert await run(steps, client) == Result()
    assert [sub for sub, _ in client.patches] == [""], "one write: the finalizer"
    assert client.patches[0][1]["metadata"]["finalizers"] == ["ours"]
    assert steps.reported == 0, "no summary after a guard's stop"
    assert client.stored["status"]["observedGeneration"] == 2


async def test_the_phases_run_then_the_report_and_one_write_claiming_the_generation() -> None:
    client = FakeClient(pool(finalizers=["ours"]))
    steps = PoolSteps(soon, later)
    assert await run(steps, client) == Result(requeue_after=5)
    assert [sub for sub, _ in client.patches] == ["status"]
    assert client.stored["status"] == {"observedGeneration": 3, "phase": "Running"}


async def test_a_failure_is_written_reported_and_raised_after_the_write() -> None:
    client = FakeClient(pool(finalizers=["ours"]))
    with pytest.raises(KeyError):
        await run(PoolSteps(failing, soon), client)
    assert client.patches == [("status", {"status": {"phase": "Failed"}})], "no generation claimed"


async def test_a_stop_that_says_nothing_writes_nothing_and_a_held_report_waits() -> None:
    client = FakeClient(pool(finalizers=["ours"]))
    steps = PoolSteps(quiet, soon)
    assert await run(steps, client) == Result(requeue_after=2)
    assert client.patches == []
    assert steps.reported == 0
    assert await run(PoolSteps(later, hold=1.5), client) == Result(requeue_after=1.5)
    assert client.patches == [], "only progress: the write waits its turn"


async def test_an_object_gone_is_forgotten() -> None:
    client = FakeClient(pool())
    steps = PoolSteps(soon)
    assert await run(steps, client, Reader(client, gone=True)) == Result()
    assert steps.forgotten == [KEY]
    assert client.patches == []
