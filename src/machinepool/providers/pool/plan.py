"""Pure planning: which instances to create where, and which Machines to delete.

The engine turns what it observed (instances, their Machines, their Nodes) into ``Member``s
and asks ``plan()`` what to do next. One call plans one step; the engine acts, the world
changes, and the next reconcile plans again (level-triggered), so each step only needs to be
safe, not complete. The rules:

- **count**: ``replicas`` pending-or-running instances that are not being deleted;
- **failed** instances are always deleted (their replacement is part of the count);
- **scale-down** victims, in order: ``cluster.x-k8s.io/delete-machine`` annotated, not Ready,
  outdated, then the busiest failure domain, then ``deletePolicy`` (Oldest, Newest, Random);
- **rolling replacement** of outdated instances (template hash differs): up to
  ``replicas + maxSurge`` instances run at once, counting those still running behind a
  Machine being deleted (the cloud still runs and bills them; at 10 x 1,000, leaving them out
  let each pool grow to 1,800 instances while its drains queued); outdated ones are deleted
  only while at least ``replicas - maxUnavailable`` Ready instances remain (never counting one
  being deleted; Ready: its Node and its Machine both, as MachinePool readyReplicas
  counts). Replacing an instance that is not active (failed, or deleted for its health) is
  part of the count, never held back by the surge. Not with ``replace_outdated`` off
  (strategy ``OnDelete``): then an outdated instance goes only when its Machine is deleted
  by someone else, and one whose Machine the core's rollout marked is replaced at once (its
  replacement is part of the count; the core deletes it once that one is Ready);
- **spread**: new instances go to the failure domain with the fewest up-to-date instances,
  then the fewest instances, then the listed order, so counts differ by at most one;
- **burst**: one step creates at most ``burst`` instances (``BURST``, as the ReplicaSet
  controller's burstReplicas caps one sync), so a pool of thousands reports its first
  instances, and the core starts on their Machines, while the rest are still being made;
- a member without an owner Machine is never a victim: deletion goes through the Machine so
  the Node is drained first;
- **warm pool** (``warm_size`` above zero): instances booted ahead and kept stopped, outside
  the count, with no Machine and no Node. A step that needs new instances starts stopped
  up-to-date ones first (spread as creates are), and creates only the rest; then the warm
  pool is topped up to ``warm_size`` with the burst left, or trimmed (oldest first) but for
  those the pool itself still needs after this step (a rollout its surge holds back). Warm
  instances of an old template and failed ones are deleted at once, directly (no Node to
  drain), so a rollout refreshes the warm pool too.

Everything here is deterministic (``Random`` hashes ids with a seed) and unit-tested.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from machinepool.api.rollingupdate import DeletePolicy
from machinepool.providers.pool.types import InstanceState

__all__ = ["BURST", "Member", "Plan", "PlanInput", "order_victims", "plan", "spread"]

BURST = 100
"""Instances one step creates at most. At 10 x 1,000, a pool that created all 1,000 (and
their infra machines) before its first report left the core idle for minutes and then with
all of it at once; steps of 100 let the two overlap."""


@dataclass(frozen=True)
class Member:
    """One instance with everything planning needs to know about it."""

    id: str
    state: InstanceState
    failure_domain: str
    created: datetime
    up_to_date: bool = True
    """Its template hash equals the pool's current one."""
    ready: bool = False
    """Its Node is Ready and so is its Machine (what MachinePool readyReplicas counts)."""
    deleting: bool = False
    """Its Machine or infra machine is being deleted (or the instance is terminated), or the
    core's rollout marked its Machine for replacement (``c.REPLACE_MACHINE_ANNOTATION``)."""
    delete_requested: bool = False
    """Its Machine carries the delete-machine annotation."""
    has_machine: bool = False
    """An owner Machine exists, so it can be deleted (drained) through it."""
    warm: bool = False
    """In the warm pool: booting to be stopped, or stopped; not a member of the pool yet."""

    @property
    def running(self) -> bool:
        """Pending or running, on its way out or not: what maxSurge bounds."""
        return not self.warm and self.state in (InstanceState.PENDING, InstanceState.RUNNING)

    @property
    def prepared(self) -> bool:
        """A warm instance ready to start: booted, stopped, of the current template."""
        return self.warm and self.state is InstanceState.STOPPED and self.up_to_date

    @property
    def active(self) -> bool:
        """Counts towards replicas: pending or running and not on its way out."""
        return self.running and not self.deleting


@dataclass(frozen=True)
class PlanInput:
    """The observed pool and the desired shape."""

    members: Sequence[Member]
    replicas: int
    surge: int
    unavailable: int
    delete_policy: DeletePolicy = DeletePolicy.OLDEST
    failure_domains: Sequence[str] = ()
    """Where new instances may go, in preference order; never empty when creating."""
    full_domains: frozenset[str] = frozenset()
    """Failure domains without capacity right now."""
    nodes_known: bool = True
    """False when Node readiness could not be read: no rolling deletions then."""
    seed: str = ""
    """Seeds the Random delete policy (the pool's UID), so plans are reproducible."""
    burst: int = BURST
    """Instances one step creates (or starts) at most (the rest in the next steps)."""
    warm_size: int = 0
    """Warm instances to keep booted and stopped beside the pool (0: no warm pool)."""
    replace_outdated: bool = True
    """Replace outdated instances on its own (strategy RollingUpdate); False for OnDelete."""


@dataclass
class Plan:
    """One step: failure domains of instances to create, members whose Machine to delete,
    and the warm pool's changes."""

    create: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    start: list[str] = field(default_factory=list)
    """Warm instances to start: they join the pool in place of as many creates."""
    create_warm: list[str] = field(default_factory=list)
    """Failure domains of warm instances to create (booted, then stopped)."""
    delete_warm: list[str] = field(default_factory=list)
    """Warm instances to terminate directly: outdated, failed or beyond the warm size."""
    waiting: list[str] = field(default_factory=list)
    """Why the plan holds back (shown in conditions)."""

    @property
    def empty(self) -> bool:
        return not (
            self.create or self.delete or self.start or self.create_warm or self.delete_warm
        )


def plan(inp: PlanInput) -> Plan:
    """Plan the next step for a pool (see the module docstring for the rules)."""
    result = Plan()
    failed = [
        m for m in inp.members if m.state is InstanceState.FAILED and not m.deleting and not m.warm
    ]
    result.delete.extend(m.id for m in failed if m.has_machine)
    if any(not m.has_machine for m in failed):
        result.waiting.append("failed instances wait for their Machines before deletion")
    active = [m for m in inp.members if m.active]
    surplus = _surplus_victims(inp, active)
    result.delete.extend(m.id for m in surplus)
    removed = {m.id for m in surplus}
    remaining = [m for m in active if m.id not in removed]
    result.delete.extend(m.id for m in _rolling_victims(inp, remaining, result))
    domains = _creates(inp, active, result)
    result.start = _starts(inp, active, result, len(domains))
    result.create = domains[len(result.start) :]
    if result.start:
        # Re-spread the creates left over, counting the started instances where they are.
        started = [m for m in inp.members if m.id in set(result.start)]
        current = [m for m in active if m.id not in set(result.delete)] + started
        usable = [fd for fd in inp.failure_domains if fd not in inp.full_domains]
        result.create = spread(usable, current, len(result.create)) if result.create else []
    _warm_pool(inp, result)
    return result


def _starts(inp: PlanInput, active: Sequence[Member], result: Plan, count: int) -> list[str]:
    """Up to ``count`` prepared warm instances to start, picked so the pool's failure
    domains stay as even as ``spread`` keeps them."""
    prepared = sorted((m for m in inp.members if m.prepared), key=lambda m: (m.created, m.id))
    if not prepared or count <= 0:
        return []
    current = [m for m in active if m.id not in set(result.delete)]
    fresh = Counter(m.failure_domain for m in current if m.up_to_date)
    total = Counter(m.failure_domain for m in current)
    chosen: list[str] = []
    while prepared and len(chosen) < count:
        pick = min(prepared, key=lambda m: (fresh[m.failure_domain], total[m.failure_domain]))
        prepared.remove(pick)
        fresh[pick.failure_domain] += 1
        total[pick.failure_domain] += 1
        chosen.append(pick.id)
    return chosen


def _warm_pool(inp: PlanInput, result: Plan) -> None:
    """Delete warm instances that cannot serve (outdated, failed) or are beyond the size,
    and create the missing ones with what is left of this step's burst."""
    warm = [m for m in inp.members if m.warm and not m.deleting and m.id not in result.start]
    stale = [m for m in warm if not m.up_to_date or m.state is InstanceState.FAILED]
    result.delete_warm.extend(m.id for m in stale)
    keep = sorted((m for m in warm if m not in stale), key=lambda m: (m.created, m.id))
    # Warm instances the pool itself still needs after this step (a rollout held back by its
    # surge, a scale-up beyond this burst) are kept for it, whatever the warm size: trimming
    # one now would only boot a new instance in its place a step later.
    gone = set(result.delete)
    fresh = sum(1 for m in inp.members if m.active and m.up_to_date and m.id not in gone)
    reserved = min(len(keep), max(0, inp.replicas - fresh - len(result.start) - len(result.create)))
    excess = len(keep) - reserved - inp.warm_size
    if excess > 0:
        result.delete_warm.extend(m.id for m in keep[:excess])
        return
    room = inp.burst - len(result.create) - len(result.start)
    count = min(-excess, room)
    usable = [fd for fd in inp.failure_domains if fd not in inp.full_domains]
    if count > 0 and usable:
        result.create_warm = spread(usable, keep, count)


def _creates(inp: PlanInput, active: Sequence[Member], result: Plan) -> list[str]:
    """Failure domains of the instances to create this step."""
    current = [m for m in active if m.id not in set(result.delete)]
    new = [m for m in current if m.up_to_date]
    running = sum(1 for m in inp.members if m.running)
    base_need = inp.replicas - len(current)
    surge_need = min(inp.replicas - len(new), inp.replicas + inp.surge - running)
    if max(base_need, surge_need) <= 0 < inp.replicas - len(new) and running > len(active):
        result.waiting.append(
            f"maxSurge reached: {running - len(active)} instances being deleted still run"
        )
    count = min(max(0, base_need, surge_need), inp.burst)
    if count <= 0:
        return []
    usable = [fd for fd in inp.failure_domains if fd not in inp.full_domains]
    if not usable:
        result.waiting.append("no failure domain has capacity for new instances")
        return []
    return spread(usable, current, count)


def spread(domains: Sequence[str], members: Iterable[Member], count: int) -> list[str]:
    """Failure domains for ``count`` new instances, evening out the up-to-date ones first.

    >>> spread(["a", "b"], [], 3)
    ['a', 'b', 'a']
    """
    members = list(members)
    fresh = Counter(m.failure_domain for m in members if m.up_to_date)
    total = Counter(m.failure_domain for m in members)
    rank = {fd: i for i, fd in enumerate(domains)}
    chosen: list[str] = []
    for _ in range(count):
        fd = min(domains, key=lambda d: (fresh[d], total[d], rank[d]))
        fresh[fd] += 1
        total[fd] += 1
        chosen.append(fd)
    return chosen


def _surplus_victims(inp: PlanInput, active: Sequence[Member]) -> list[Member]:
    """Victims of a scale-down: instances beyond replicas plus the surge a rollout may use."""
    outdated = sum(1 for m in active if not m.up_to_date)
    allowance = min(inp.surge, outdated)
    surplus = len(active) - inp.replicas - allowance
    if surplus <= 0:
        return []
    candidates = [m for m in active if m.has_machine]
    return order_victims(candidates, inp.delete_policy, active, seed=inp.seed)[:surplus]


def _rolling_victims(inp: PlanInput, active: Sequence[Member], result: Plan) -> list[Member]:
    """Outdated instances that may go now without breaking the availability floor."""
    outdated = [m for m in active if not m.up_to_date and m.has_machine]
    if not outdated or not inp.replace_outdated:
        return []
    if not inp.nodes_known:
        result.waiting.append("Node readiness unknown; outdated instances are kept for now")
        return []
    floor = inp.replicas - inp.unavailable
    new_unready = sum(1 for m in active if m.up_to_date and not m.ready)
    count_budget = len(active) - floor - new_unready
    ready_budget = sum(1 for m in active if m.ready) - floor
    victims: list[Member] = []
    for member in order_victims(outdated, inp.delete_policy, active, seed=inp.seed):
        if count_budget <= 0:
            break
        if member.ready:
            if ready_budget <= 0:
                continue
            ready_budget -= 1
        count_budget -= 1
        victims.append(member)
    if len(victims) < len(outdated) and ready_budget <= 0:
        result.waiting.append(
            f"rolling update holds at {floor} Ready instances (replicas - maxUnavailable)"
        )
    return victims


def order_victims(
    candidates: Sequence[Member],
    policy: DeletePolicy,
    population: Sequence[Member] | None = None,
    *,
    seed: str = "",
) -> list[Member]:
    """``candidates`` in deletion order: annotated, not Ready, outdated, busiest failure
    domain (counted over ``population``), then ``policy``.

    Picks one at a time so that taking several evens out the failure domains as it goes.
    """
    counts = Counter(m.failure_domain for m in (population or candidates))
    queues: dict[tuple[int, str], list[Member]] = {}
    for member in sorted(candidates, key=lambda m: _policy_key(m, policy, seed), reverse=True):
        queues.setdefault((_tier(member), member.failure_domain), []).append(member)
    ordered: list[Member] = []
    while queues:
        tier = min(t for t, _ in queues)
        heads = [(fd, q[-1]) for (t, fd), q in queues.items() if t == tier]
        fd, pick = min(heads, key=lambda h: (-counts[h[0]], _policy_key(h[1], policy, seed)))
        queue = queues[(tier, fd)]
        queue.pop()
        if not queue:
            del queues[(tier, fd)]
        counts[fd] -= 1
        ordered.append(pick)
    return ordered


def _tier(member: Member) -> int:
    if member.delete_requested:
        return 0
    if member.state is InstanceState.FAILED or not member.ready:
        return 1
    if not member.up_to_date:
        return 2
    return 3


def _policy_key(member: Member, policy: DeletePolicy, seed: str) -> tuple[float, str]:
    stamp = member.created.timestamp()
    if policy is DeletePolicy.OLDEST:
        return (stamp, member.id)
    if policy is DeletePolicy.NEWEST:
        return (-stamp, member.id)
    digest = hashlib.sha256(f"{seed}/{member.id}".encode()).hexdigest()
    return (0.0, digest)
