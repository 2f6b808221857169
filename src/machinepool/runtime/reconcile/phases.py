"""The one shape of a reconcile: one driver reads the object, guards, runs phases over a
scope, sums up and writes once on the way out, whatever the exit.

Every reconciler here (the core MachinePool, Machine and MachineHealthCheck controllers, the
kubeadm bootstrap, the pool engine, the AWS provider's) is a ``Steps`` that ``drive`` runs
(``Steps.reconcile``: what its controller calls), so a failure is noted, written and retried
the same way whichever controller met it::

    obj = await steps.reader.get(key)         # its OwnReader: also whom the write goes to
    steps.before(key, obj)                    # e.g. a cleanup; None: steps.forget(key), done
    scope = steps.scope(key, obj)             # a Stop: no Cluster, not ours (the guards
                                              # that need no scope)
    outcome = run_phases(scope, guards)       # finalizer, paused: a Stop ends the reconcile
    outcome += run_phases(scope, phases)      # the work
    outcome += await steps.report(scope, outcome)   # the status summary
    write once (held back while it only reports progress: steps.hold)
    return steps.finish(scope, outcome).settle(text)

The rules:

- A phase is any ``async (scope) -> Result``; phases run in order over the same scope.
- A failed phase does not stop the others: independent phases each get their turn, so one
  failure neither hides another nor leaves the conditions of the rest unwritten. Where a
  phase needs what the ones before it found (``chain=True``), the first failure ends the run.
  Guards are always a chain.
- The one way a phase stops the reconcile is to return a ``Stop`` (a ``Result``, so its
  requeue counts). Its ``then`` says what follows: ``REPORT`` (the summary and the write, as
  after the last phase: waiting for an owner, paused, invalid input), ``WRITE`` (the write of
  what the phases changed, no summary, no observedGeneration: a guard's finalizer or Paused
  condition) or ``NOTHING`` (no write at all: the caches do not yet show our last writes).
- Each error keeps its type and gets a note naming the phase and what it is for, so
  "connection refused" says whether the drain or the Node lookup met it, in the log line too.
- The results fold into the one that comes back soonest (``lowest_requeue``).
- The write (``patch_on_exit``) happens whatever happened. The status claims the object's
  generation (``status.observedGeneration``) only when no phase failed (and the steps say the
  pass acted on the spec: ``observed``), and a failed write joins the phases' errors instead of
  hiding them. A status write that lost its lock to another writer is rebased by the
  ``Patcher``, keeping their conditions, instead of redoing the reconcile.
- ``Outcome.settle`` raises what was gathered in one way, for the controller's contract: a
  single error as itself; lost locks only as ``Conflict`` (retried quietly); problems no retry
  can fix only as ``TerminalError``; anything else as an ``ExceptionGroup`` naming the object.
- What a reconciler keeps about a key between passes lives in one ``KeyMemory``; the driver
  forgets it when the object is gone.
"""

from __future__ import annotations

import enum
import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from machinepool.runtime.kube.client import Obj
from machinepool.runtime.kube.errors import Conflict, NotFound, describe_error
from machinepool.runtime.kube.keys import ObjectKey
from machinepool.runtime.kube.patch import Patcher
from machinepool.runtime.kube.reader import OwnReader
from machinepool.runtime.reconcile.controller import Result, TerminalError

__all__ = [
    "KeyMemory",
    "Outcome",
    "Phase",
    "Steps",
    "Stop",
    "Then",
    "drive",
    "lowest_requeue",
    "patch_on_exit",
    "purpose",
    "run_phases",
]

S = TypeVar("S")
M = TypeVar("M")

Phase = Callable[[S], Awaitable[Result]]
"""One step of a reconcile over its scope ``S``: reads and fills the scope, returns when to
come back (a ``Stop`` to end the reconcile there)."""


class Then(enum.Enum):
    """What follows a ``Stop``."""

    REPORT = "report"
    """The summary and the write, as after the last phase."""
    WRITE = "write"
    """The write of what was changed so far; no summary, no observedGeneration."""
    NOTHING = "nothing"
    """No write at all."""


@dataclass(frozen=True)
class Stop(Result):
    """A phase's (or a scope builder's) answer that the phases after it have nothing to do
    this pass; ``then`` says what the driver does next."""

    then: Then = Then.REPORT


@dataclass
class Outcome:
    """What a run of phases came to: the soonest requeue, every error, each noted with its
    phase, and the ``Stop`` that ended it, if one did."""

    result: Result = field(default_factory=Result)
    errors: list[Exception] = field(default_factory=list)
    stop: Stop | None = None

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def then(self) -> Then:
        """What the driver does after the phases: ``REPORT`` unless a ``Stop`` said else."""
        return Then.REPORT if self.stop is None else self.stop.then

    def __add__(self, other: Outcome) -> Outcome:
        """Both runs' errors, the sooner of their requeues, the first one's stop."""
        return Outcome(
            lowest_requeue([self.result, other.result]),
            [*self.errors, *other.errors],
            self.stop or other.stop,
        )

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
            return Result(requeue_after=self.result.requeue_after)
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
    run; otherwise every phase runs whatever the others did. A phase that returns a ``Stop``
    ends the run either way. Cancellation is never caught.
    """
    results: list[Result] = []
    errors: list[Exception] = []
    stop: Stop | None = None
    for phase in phases:
        try:
            result = await phase(scope)
        except Exception as exc:
            exc.add_note(purpose(phase))
            errors.append(exc)
            if chain:
                break
            continue
        results.append(result)
        if isinstance(result, Stop):
            stop = result
            break
    return Outcome(lowest_requeue(results), errors, stop)


async def patch_on_exit(
    patcher: Patcher, obj: Obj, outcome: Outcome | None = None, *, observed: bool = True
) -> Obj:
    """The reconcile's one write of ``obj`` (what changed since ``patcher``'s snapshot);
    the newest copy the server gave, or ``obj`` when nothing newer was had.

    With the ``outcome`` of its phases: ``status.observedGeneration`` says the status was
    computed for this generation only when the outcome is ok (and ``observed``: ``False``
    for a kind without the field, or a reconcile that did not act on the spec), and a failed
    write joins the outcome's errors, to be raised with them by ``settle``. Without one a
    failure raises.

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


class KeyMemory(Generic[M]):
    """What one reconciler keeps about each key from one pass to the next, in one place:
    ``of(key)`` is that key's memory (made by ``new`` on first use), ``forget(key)`` drops all
    of it at once (the driver calls it when the object is gone).

    >>> memory = KeyMemory(PoolMemory)
    >>> memory.of(key).in_sync["m-1"] = facts
    """

    def __init__(self, new: Callable[[], M]) -> None:
        self._new = new
        self._kept: dict[ObjectKey, M] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, key: object) -> bool:
        return key in self._kept

    def of(self, key: ObjectKey) -> M:
        kept = self._kept.get(key)
        if kept is None:
            kept = self._kept[key] = self._new()
        return kept

    def get(self, key: ObjectKey) -> M | None:
        """``key``'s memory if it has any, without making it."""
        return self._kept.get(key)

    def forget(self, key: ObjectKey) -> None:
        self._kept.pop(key, None)


class Steps(ABC, Generic[S]):
    """One kind's reconcile, as ``drive`` runs it: a reconciler subclasses it and overrides
    what its kind has. Only ``scope`` and ``phases`` are required."""

    kind: str = ""
    """How messages name the kind (``MachinePool``)."""
    chain: bool = False
    """Each phase needs what the ones before it found: the first failure ends the run."""
    reader: OwnReader
    """Where the object is read from, and (its client, its resource) written to: set by the
    subclass's ``__init__``, or by the reconciler that builds the steps once its informer is
    there."""

    async def reconcile(self, key: ObjectKey) -> Result:
        """One reconcile of ``key`` (``drive`` over these steps): what a controller runs."""
        return await drive(self, key)

    async def before(self, key: ObjectKey, obj: Obj | None) -> Result | None:
        """The kind's work on ``key`` before its object (``None``: gone), such as the
        cleanup after a deletion no finalizer held; a ``Result`` ends the reconcile there."""
        return None

    def forget(self, key: ObjectKey) -> None:
        """``key``'s object is gone: drop what was kept about it."""

    @abstractmethod
    def scope(self, key: ObjectKey, obj: Obj, patcher: Patcher) -> S | Stop:
        """The scope of one pass over ``obj`` (a private copy the phases may change, written
        on exit by ``patcher``, which a phase may also use for a write that must not wait:
        AWS's checkpoints); a ``Stop`` when there is none to build (no Cluster, not ours).
        Raising fails the reconcile, writing nothing."""

    def guards(self, scope: S) -> Sequence[Phase[S]]:
        """Run as a chain before the phases: a finalizer to add, the Paused condition."""
        return ()

    @abstractmethod
    def phases(self, scope: S) -> Sequence[Phase[S]]:
        """The phases of this pass, in order."""

    async def report(self, scope: S, outcome: Outcome) -> Outcome:
        """The status summary after the phases (not after a ``Stop`` that says else); what
        it returns joins the outcome."""
        return Outcome()

    def observed(self, scope: S) -> bool:
        """Whether this pass acted on the spec, so an ok status claims its generation."""
        return True

    def hold(self, scope: S, before: Obj, after: Obj) -> float:
        """Seconds to hold back a write that only reports progress (``runtime.reconcile.spacing``);
        0 to write now."""
        return 0.0

    def wrote(self, scope: S) -> None:
        """The write went out (the server gave a newer copy)."""

    async def finish(self, scope: S, outcome: Outcome) -> Outcome:
        """After the write, or in its place: what more the pass does, and the outcome to
        settle."""
        return outcome

    def text(self, key: ObjectKey) -> str:
        return f"{self.kind} {key}"


async def drive(steps: Steps[S], key: ObjectKey) -> Result:
    """One reconcile of ``key``: read, build the scope, guard, run the phases, report, write
    once, settle (the module docstring has the rules). Read through ``steps.reader``: the
    cache, never older than our own last write, since the write is a diff against this copy;
    written through its client, to its resource."""
    reader = steps.reader
    obj = await reader.get(key)
    if (done := await steps.before(key, obj)) is not None:
        return done
    if obj is None:
        steps.forget(key)
        return Result()
    patcher = Patcher(reader.client, reader.resource, obj, on_patched=reader.wrote)
    built = steps.scope(key, obj, patcher)
    if isinstance(built, Stop):
        if built.then is Then.NOTHING:
            return Result(requeue_after=built.requeue_after)
        await patch_on_exit(patcher, obj)
        return Result(requeue_after=built.requeue_after)
    scope: S = built
    outcome = await run_phases(scope, steps.guards(scope), chain=True)
    if outcome.ok and outcome.stop is None:
        outcome += await run_phases(scope, steps.phases(scope), chain=steps.chain)
    if outcome.then is Then.NOTHING:
        return (await steps.finish(scope, outcome)).settle(steps.text(key))
    if outcome.then is Then.REPORT:
        outcome += await steps.report(scope, outcome)
        if outcome.ok and (wait := steps.hold(scope, patcher.snapshot, obj)):
            # Everything the phases did in the world is done; only the report waits, and
            # the next reconcile computes it afresh.
            outcome += Outcome(Result(requeue_after=wait))
            return (await steps.finish(scope, outcome)).settle(steps.text(key))
    observed = outcome.then is Then.REPORT and steps.observed(scope)
    if await patch_on_exit(patcher, obj, outcome, observed=observed) is not obj:
        steps.wrote(scope)
    return (await steps.finish(scope, outcome)).settle(steps.text(key))
