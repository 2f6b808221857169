"""The reconcile skeleton: how phases run, how their errors are noted and raised, and the
one patch on exit (``machinepool.runtime.phases``)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from machinepool.runtime import (
    Client,
    Conflict,
    NotFound,
    Outcome,
    Patcher,
    Resource,
    Result,
    TerminalError,
    describe_error,
    patch_on_exit,
    run_phases,
)

POOLS = Resource("example.io", "v1", "pools", "Pool")


@dataclass
class Scope:
    ran: list[str] = field(default_factory=list)
    halt: bool = False


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
    scope.halt = True
    return Result()


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


async def test_a_halting_phase_stops_the_phases_after_it() -> None:
    scope = Scope()
    outcome = await run_phases(scope, [soon, stop, later])
    assert scope.ran == ["soon", "stop"]
    assert outcome.ok
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
