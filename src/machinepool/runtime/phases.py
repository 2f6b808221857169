"""The one shape of a reconcile: phases over a scope, their errors gathered, one patch on exit.

Every reconciler here (the core MachinePool and Machine controllers, the kubeadm bootstrap,
the pool engine, AWS) reads its object, builds a scope, runs phases over it, sums up its
status and writes once. This module is the part they share, so that a failure is noted,
written and retried the same way whichever controller met it::

    outcome = await run_phases(scope, PHASES)
    summarise(scope)                            # the reconciler's own status summary
    await patch_on_exit(patcher, obj, outcome)
    return outcome.settle("MachinePool ns/name")

The rules:

- A phase is any ``async (scope) -> Result``; phases run in order over the same scope.
- A failed phase does not stop the others: independent phases each get their turn, so one
  failure neither hides another nor leaves the conditions of the rest unwritten. Where a
  phase needs what the ones before it found (``chain=True``), the first failure ends the run.
- A phase ends the run, chained or not, by setting ``scope.halt`` (``Halting``): the phases
  after it have nothing to do this pass (waiting for a Cluster, paused, invalid input).
- Each error keeps its type and gets a note naming the phase and what it is for, so
  "connection refused" says whether the drain or the Node lookup met it, in the log line too.
- The results fold into the one that comes back soonest (``lowest_requeue``).
- ``patch_on_exit`` writes whatever happened. The status claims the object's generation
  (``status.observedGeneration``) only when no phase failed, and a failed write joins the
  phases' errors instead of hiding them. A status write that lost its lock to another writer
  is rebased by the ``Patcher``, keeping their conditions, instead of redoing the reconcile.
- ``Outcome.settle`` raises what was gathered in one way, for the controller's contract: a
  single error as itself; lost locks only as ``Conflict`` (retried quietly); problems no retry
  can fix only as ``TerminalError``; anything else as an ``ExceptionGroup`` naming the object.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from machinepool.runtime.client import Obj
from machinepool.runtime.controller import Result, TerminalError
from machinepool.runtime.errors import Conflict, NotFound, describe_error
from machinepool.runtime.patch import Patcher

__all__ = [
    "Halting",
    "Outcome",
    "Phase",
    "lowest_requeue",
    "patch_on_exit",
    "purpose",
    "run_phases",
]

S = TypeVar("S")

Phase = Callable[[S], Awaitable[Result]]
"""One step of a reconcile over its scope ``S``: reads and fills the scope, returns when to
come back."""


@runtime_checkable
class Halting(Protocol):
    """A scope whose phases can end the run: a phase sets ``halt`` when the phases after it
    have nothing to do this pass."""

    halt: bool


@dataclass
class Outcome:
    """What a run of phases came to: the soonest requeue and every error, each noted with
    its phase."""

    result: Result = field(default_factory=Result)
    errors: list[Exception] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def __add__(self, other: Outcome) -> Outcome:
        """Both runs' errors, and the sooner of their requeues."""
        return Outcome(lowest_requeue([self.result, other.result]), [*self.errors, *other.errors])

    def settle(self, what: str) -> Result:
        """The result when nothing failed; otherwise raise the errors, ``what`` (``Kind
        ns/name``) naming the object:

        - one error: itself (its note says which phase);
        - lost optimistic locks and nothing else that a retry could fix: the first
          ``Conflict``, which the controller retries quietly (the retry reads the newer copy
          and meets any other problem again);
        - only ``TerminalError``\\ s: one ``TerminalError`` naming them all, not retried;
        - anything else: an ``ExceptionGroup`` of them all, retried with backoff and logged
          in one line when every one of them is expected.
        """
        errors = self.errors
        if not errors:
            return self.result
        if len(errors) == 1:
            raise errors[0]
        retryable = [e for e in errors if not isinstance(e, TerminalError)]
        if not retryable:
            text = "; ".join(describe_error(e) for e in errors)
            raise TerminalError(f"{what}: {text}") from errors[0]
        if all(isinstance(e, Conflict) for e in retryable):
            raise retryable[0]
        raise ExceptionGroup(what, errors)


def lowest_requeue(results: Iterable[Result]) -> Result:
    """The result that comes back soonest; ``Result()`` when none asks to come back."""
    delays = [r.requeue_after for r in results if r.requeue_after]
    return Result(requeue_after=min(delays)) if delays else Result()


def purpose(phase: Callable[..., Any]) -> str:
    """How an error names ``phase``: its name and the first sentence of its docstring.

    >>> purpose(load_owner)
    'phase load_owner: Find the owning MachinePool and its Cluster'
    """
    name = getattr(phase, "__name__", None) or repr(phase)
    doc = inspect.getdoc(phase)
    if not doc:
        return f"phase {name}"
    summary = " ".join(doc.split("\n\n", 1)[0].split()).replace("``", "")
    sentence = summary.split(". ", 1)[0].rstrip(".")
    return f"phase {name}: {sentence}"


async def run_phases(scope: S, phases: Iterable[Phase[S]], *, chain: bool = False) -> Outcome:
    """Run ``phases`` over ``scope`` in order (see the module docstring for the rules).

    ``chain``: each phase needs what the ones before it found, so the first failure ends the
    run; otherwise every phase runs whatever the others did. A scope that is ``Halting`` ends
    the run after any phase that sets its ``halt``. Cancellation is never caught.
    """
    results: list[Result] = []
    errors: list[Exception] = []
    for phase in phases:
        try:
            results.append(await phase(scope))
        except Exception as exc:
            exc.add_note(purpose(phase))
            errors.append(exc)
            if chain:
                break
        if isinstance(scope, Halting) and scope.halt:
            break
    return Outcome(lowest_requeue(results), errors)


async def patch_on_exit(
    patcher: Patcher, obj: Obj, outcome: Outcome | None = None, *, observed: bool = True
) -> Obj:
    """The reconcile's one write of ``obj`` (what changed since ``patcher``'s snapshot);
    the newest copy the server gave, or ``obj`` when nothing newer was had.

    With the ``outcome`` of its phases: ``status.observedGeneration`` says the status was
    computed for this generation only when the outcome is ok (and ``observed``: ``False``
    for a kind without the field, or a reconcile that did not act on the spec), and a failed
    write joins the outcome's errors, to be raised with them by ``settle``. Without one (a
    write before any phase ran: a finalizer, the Paused condition) a failure raises.

    An object already gone is what a deletion wanted; gone while not being deleted, the
    error stands and the next event decides.
    """
    if outcome is not None and outcome.ok and observed:
        generation = (obj.get("metadata") or {}).get("generation")
        if generation is not None:
            obj.setdefault("status", {})["observedGeneration"] = generation
    try:
        return await patcher.patch(obj)
    except Exception as exc:
        if isinstance(exc, NotFound) and (obj.get("metadata") or {}).get("deletionTimestamp"):
            return obj
        if outcome is None:
            raise
        exc.add_note("writing the reconcile's result")
        outcome.errors.append(exc)
        return obj
