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
  part of the count, never held back by the surge;
- **spread**: new instances go to the failure domain with the fewest up-to-date instances,
  then the fewest instances, then the listed order, so counts differ by at most one;
- **burst**: one step creates at most ``burst`` instances (``BURST``, as the ReplicaSet
  controller's burstReplicas caps one sync), so a pool of thousands reports its first
  instances, and the core starts on their Machines, while the rest are still being made;
- a member without an owner Machine is never a victim: deletion goes through the Machine so
  the Node is drained first.

Everything here is deterministic (``Random`` hashes ids with a seed) and unit-tested.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from machinepool.providers.pool.strategy import DeletePolicy
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
    """Its Machine or infra machine is being deleted (or the instance is terminated)."""
    delete_requested: bool = False
    """Its Machine carries the delete-machine annotation."""
    has_machine: bool = False
    """An owner Machine exists, so it can be deleted (drained) through it."""

    @property
    def running(self) -> bool:
        """Pending or running, on its way out or not: what maxSurge bounds."""
        return self.state in (InstanceState.PENDING, InstanceState.RUNNING)

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
    """Instances one step creates at most (the rest in the next steps)."""


@dataclass
class Plan:
    """One step: failure domains of instances to create, members whose Machine to delete."""

    create: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    """Why the plan holds back (shown in conditions)."""

    @property
    def empty(self) -> bool:
        return not self.create and not self.delete


def plan(inp: PlanInput) -> Plan:
    """Plan the next step for a pool (see the module docstring for the rules)."""
    result = Plan()
    failed = [m for m in inp.members if m.state is InstanceState.FAILED and not m.deleting]
    result.delete.extend(m.id for m in failed if m.has_machine)
    if any(not m.has_machine for m in failed):
        result.waiting.append("failed instances wait for their Machines before deletion")
    active = [m for m in inp.members if m.active]
    surplus = _surplus_victims(inp, active)
    result.delete.extend(m.id for m in surplus)
    removed = {m.id for m in surplus}
    remaining = [m for m in active if m.id not in removed]
    result.delete.extend(m.id for m in _rolling_victims(inp, remaining, result))
    result.create = _creates(inp, active, result)
    return result


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
    if not outdated:
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
