"""Planning: count, spread, failed replacement, victim order and rolling-update safety."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st

from machinepool.providers.pool import (
    DeletePolicy,
    InstanceState,
    Member,
    PlanInput,
    order_victims,
    plan,
    spread,
)
from machinepool.providers.pool.plan import BURST

T0 = datetime(2025, 1, 1, tzinfo=UTC)
FDS = ("a", "b", "c")


def member(i: int, fd: str = "a", **kw: object) -> Member:
    base = Member(
        id=f"m{i:03d}",
        state=InstanceState.RUNNING,
        failure_domain=fd,
        created=T0 + timedelta(minutes=i),
        up_to_date=True,
        ready=True,
        has_machine=True,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def pool(n: int, **kw: object) -> list[Member]:
    return [member(i, FDS[i % 3], **kw) for i in range(n)]


def test_scale_up_spreads_evenly() -> None:
    step = plan(PlanInput(pool(2), replicas=7, surge=1, unavailable=0, failure_domains=FDS))
    assert step.delete == []
    counts = Counter([m.failure_domain for m in pool(2)] + step.create)
    assert max(counts.values()) - min(counts.values()) <= 1
    assert len(step.create) == 5


def test_a_big_scale_up_goes_in_bursts_that_stay_even() -> None:
    """One step creates at most ``burst`` instances, spread evenly; the next step, with them
    counted, creates the next burst."""
    first = plan(PlanInput([], replicas=250, surge=1, unavailable=0, failure_domains=FDS))
    assert len(first.create) == BURST
    assert sorted(Counter(first.create).values()) == [33, 33, 34]
    made = [member(i, fd) for i, fd in enumerate(first.create)]
    second = plan(PlanInput(made, replicas=250, surge=1, unavailable=0, failure_domains=FDS))
    assert len(second.create) == BURST
    counts = Counter(first.create + second.create)
    assert max(counts.values()) - min(counts.values()) <= 1
    small = plan(PlanInput([], replicas=7, surge=1, unavailable=0, failure_domains=FDS, burst=3))
    assert len(small.create) == 3


def test_steady_pool_does_nothing() -> None:
    step = plan(PlanInput(pool(3), replicas=3, surge=1, unavailable=0, failure_domains=FDS))
    assert step.empty


def test_scale_down_prefers_annotated_then_unready_then_outdated_then_oldest() -> None:
    members = [
        member(0, "a"),
        member(1, "b", up_to_date=False),
        member(2, "c", ready=False),
        member(3, "a", delete_requested=True),
        member(4, "b"),
    ]
    ordered = order_victims(members, DeletePolicy.OLDEST)
    assert [m.id for m in ordered[:3]] == ["m003", "m002", "m001"]


def test_victim_order_is_stable_for_equal_candidates() -> None:
    members = [replace(member(0), id=name) for name in ("b", "a", "c")]
    assert [m.id for m in order_victims(members, DeletePolicy.OLDEST)] == ["a", "b", "c"]


def test_delete_policy_newest_and_random() -> None:
    members = [member(i, "a") for i in range(4)]
    assert order_victims(members, DeletePolicy.NEWEST)[0].id == "m003"
    assert order_victims(members, DeletePolicy.OLDEST)[0].id == "m000"
    first = order_victims(members, DeletePolicy.RANDOM, seed="x")
    assert order_victims(members, DeletePolicy.RANDOM, seed="x") == first


def test_scale_down_evens_out_failure_domains() -> None:
    members = [member(0, "a"), member(1, "a"), member(2, "a"), member(3, "b"), member(4, "c")]
    step = plan(PlanInput(members, replicas=3, surge=1, unavailable=0, failure_domains=FDS))
    assert step.create == []
    assert len(step.delete) == 2
    assert all(m.failure_domain == "a" for m in members if m.id in step.delete)


def test_failed_instances_are_deleted_and_replaced() -> None:
    members = [*pool(2), member(9, "c", state=InstanceState.FAILED, ready=False)]
    step = plan(PlanInput(members, replicas=3, surge=1, unavailable=0, failure_domains=FDS))
    assert step.delete == ["m009"]
    assert step.create == ["c"]


def test_member_without_machine_is_never_a_victim() -> None:
    members = [*pool(3), member(7, "a", has_machine=False, delete_requested=True)]
    step = plan(PlanInput(members, replicas=3, surge=1, unavailable=0, failure_domains=FDS))
    assert "m007" not in step.delete
    assert len(step.delete) == 1
    failed = [member(8, "a", state=InstanceState.FAILED, has_machine=False)]
    step = plan(PlanInput(failed, replicas=0, surge=1, unavailable=0, failure_domains=FDS))
    assert step.delete == []
    assert step.waiting


def test_rollout_surges_first_and_never_deletes_ready_below_replicas() -> None:
    old = pool(3, up_to_date=False)
    step = plan(PlanInput(old, replicas=3, surge=1, unavailable=0, failure_domains=FDS))
    assert len(step.create) == 1
    assert step.delete == []
    # The surge instance is pending: nothing old may go yet, and nothing more is created.
    pending = member(10, step.create[0], ready=False, state=InstanceState.PENDING)
    step = plan(PlanInput([*old, pending], replicas=3, surge=1, unavailable=0, failure_domains=FDS))
    assert step.empty
    # Once it is Ready one old instance goes, from the busiest failure domain.
    ready = replace(pending, ready=True, state=InstanceState.RUNNING)
    step = plan(PlanInput([*old, ready], replicas=3, surge=1, unavailable=0, failure_domains=FDS))
    assert len(step.delete) == 1
    victim = next(m for m in old if m.id == step.delete[0])
    assert victim.failure_domain == ready.failure_domain


def test_instances_still_running_behind_a_deleting_machine_count_toward_max_surge() -> None:
    old = pool(3, up_to_date=False)
    fresh = member(10, "a")
    draining = replace(old[0], deleting=True)
    members = [draining, *old[1:], fresh]
    step = plan(PlanInput(members, replicas=3, surge=1, unavailable=0, failure_domains=FDS))
    # 3 active + 1 draining = replicas + maxSurge: the next instance waits for the old one.
    assert step.create == []
    assert any("maxSurge reached: 1 instances being deleted" in w for w in step.waiting)
    gone = [*old[1:], fresh]
    step = plan(PlanInput(gone, replicas=3, surge=1, unavailable=0, failure_domains=FDS))
    assert len(step.create) == 1


def test_a_replacement_for_an_instance_deleted_for_its_health_is_not_held_by_the_surge() -> None:
    members = pool(3)
    members[0] = replace(members[0], deleting=True, ready=False)
    step = plan(PlanInput(members, replicas=3, surge=0, unavailable=1, failure_domains=FDS))
    assert len(step.create) == 1


@settings(max_examples=100, deadline=None)
@given(replicas=st.integers(1, 10), surge=st.integers(1, 3), linger=st.integers(0, 3))
def test_a_rollout_whose_deletions_take_time_never_runs_more_than_the_surge(
    replicas: int, surge: int, linger: int
) -> None:
    members = pool(replicas, up_to_date=False)
    leaving: dict[str, int] = {}
    serial = 500
    for _ in range(200):
        step = plan(PlanInput(members, replicas, surge, 0, failure_domains=FDS))
        if step.empty and not leaving:
            break
        # A deleted Machine's instance runs on for ``linger`` steps (drain, termination).
        leaving.update({victim: linger for victim in step.delete})
        members = [replace(m, deleting=True) if m.id in leaving else m for m in members]
        for fd in step.create:
            serial += 1
            members.append(member(serial, fd))
        assert sum(1 for m in members if m.running) <= replicas + surge
        assert sum(1 for m in members if m.ready and m.active) >= replicas
        for victim in [v for v, left in leaving.items() if left <= 0]:
            del leaving[victim]
            members = [m for m in members if m.id != victim]
        leaving = {v: left - 1 for v, left in leaving.items()}
    assert len(members) == replicas
    assert all(m.up_to_date for m in members)


def test_rollout_with_max_unavailable_and_no_surge() -> None:
    old = pool(3, up_to_date=False)
    step = plan(PlanInput(old, replicas=3, surge=0, unavailable=1, failure_domains=FDS))
    assert len(step.delete) == 1
    assert len(step.create) == 1


def test_no_rolling_deletions_when_nodes_unknown() -> None:
    members = [*pool(3, up_to_date=False), *(member(10 + i, FDS[i]) for i in range(3))]
    step = plan(
        PlanInput(
            members, replicas=3, surge=3, unavailable=0, failure_domains=FDS, nodes_known=False
        )
    )
    assert step.delete == []
    assert step.waiting


def test_full_failure_domains_are_skipped() -> None:
    step = plan(
        PlanInput(
            [], replicas=2, surge=1, unavailable=0, failure_domains=FDS, full_domains=frozenset("a")
        )
    )
    assert sorted(step.create) == ["b", "c"]
    step = plan(
        PlanInput(
            [],
            replicas=2,
            surge=1,
            unavailable=0,
            failure_domains=("a",),
            full_domains=frozenset("a"),
        )
    )
    assert step.create == []
    assert step.waiting


def test_spread_prefers_domains_short_of_up_to_date_instances() -> None:
    members = [member(0, "a"), member(1, "b", up_to_date=False), member(2, "c", up_to_date=False)]
    assert spread(FDS, members, 2) == ["b", "c"]


# --- properties: simulate reconciles until the pool settles -------------------------------


def _simulate(
    members: list[Member], replicas: int, surge: int, unavailable: int, policy: DeletePolicy
) -> list[Member]:
    """Apply plans step by step: created instances boot Ready by the next step; deleted ones
    vanish. Checks the availability floor at every observed moment."""
    floor = replicas - unavailable
    serial = 1000
    for _ in range(200):
        step = plan(PlanInput(members, replicas, surge, unavailable, policy, FDS, seed="pool-uid"))
        if step.empty:
            return members
        before_ready = sum(1 for m in members if m.ready and m.active)
        # Read before the step's deletions, so the step that retires the last outdated
        # instance is held to the floor too.
        rolling = any(not m.up_to_date for m in members)
        members = [m for m in members if m.id not in set(step.delete)]
        after_ready = sum(1 for m in members if m.ready and m.active)
        if rolling:
            assert after_ready >= min(before_ready, floor), (step, before_ready, after_ready)
        for fd in step.create:
            serial += 1
            members.append(member(serial, fd))
    raise AssertionError("pool never settled")


@settings(max_examples=150, deadline=None)
@given(
    start=st.lists(
        st.tuples(st.sampled_from(FDS), st.booleans(), st.booleans(), st.booleans()), max_size=12
    ),
    replicas=st.integers(0, 12),
    surge=st.integers(0, 4),
    unavailable=st.integers(0, 4),
    policy=st.sampled_from(list(DeletePolicy)),
)
def test_any_pool_converges_to_replicas_up_to_date_and_spread(
    start: list[tuple[str, bool, bool, bool]],
    replicas: int,
    surge: int,
    unavailable: int,
    policy: DeletePolicy,
) -> None:
    if surge == 0 and unavailable == 0:
        unavailable = 1  # what RollingUpdate.resolve does
    members = [
        member(
            i,
            fd,
            up_to_date=fresh,
            state=InstanceState.FAILED if broken else InstanceState.RUNNING,
            ready=not broken,
            delete_requested=annotated,
        )
        for i, (fd, fresh, broken, annotated) in enumerate(start)
    ]
    final = _simulate(members, replicas, surge, unavailable, policy)
    assert len(final) == replicas
    assert all(m.up_to_date and m.state is InstanceState.RUNNING for m in final)
    counts = Counter(m.failure_domain for m in final)
    started = {m.id for m in members}
    # Only instances the engine placed are spread (it does not move survivors around).
    if replicas >= len(FDS) and not started & {m.id for m in final}:
        assert max(counts[fd] for fd in FDS) - min(counts[fd] for fd in FDS) <= 1


@settings(max_examples=100, deadline=None)
@given(
    replicas=st.integers(1, 10),
    surge=st.integers(0, 3),
    unavailable=st.integers(0, 3),
)
def test_rollout_of_a_ready_pool_keeps_the_floor(
    replicas: int, surge: int, unavailable: int
) -> None:
    if surge == 0 and unavailable == 0:
        surge = 1
    members = pool(replicas, up_to_date=False)
    floor = replicas - unavailable
    serial = 500
    for _ in range(100):
        step = plan(PlanInput(members, replicas, surge, unavailable, failure_domains=FDS))
        if step.empty:
            break
        members = [m for m in members if m.id not in set(step.delete)]
        assert sum(1 for m in members if m.ready) >= min(floor, replicas)
        assert len(members) + len(step.create) <= replicas + surge
        for fd in step.create:
            serial += 1
            members.append(member(serial, fd))
    assert len(members) == replicas
    assert all(m.up_to_date for m in members)


# --- warm pools ------------------------------------------------------------------------------


def warm(i: int, fd: str = "a", **kw: object) -> Member:
    """A prepared warm instance: booted, stopped, no Machine."""
    base = member(i, fd, state=InstanceState.STOPPED, ready=False, has_machine=False, warm=True)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_a_scale_up_starts_warm_instances_first_and_creates_the_rest() -> None:
    members = [*pool(3), warm(10, "a"), warm(11, "b")]
    step = plan(
        PlanInput(members, replicas=6, surge=1, unavailable=0, failure_domains=FDS, warm_size=2)
    )
    assert sorted(step.start) == ["m010", "m011"]
    assert step.create == ["c"]  # a and b got the started ones
    assert len(step.create_warm) == 2  # the warm pool is topped up in the same step
    assert not step.delete
    assert not step.delete_warm


def test_warm_instances_are_not_members_and_the_pool_is_topped_up() -> None:
    step = plan(PlanInput(pool(3), replicas=3, surge=1, unavailable=0, failure_domains=FDS))
    assert step.empty
    step = plan(
        PlanInput(pool(3), replicas=3, surge=1, unavailable=0, failure_domains=FDS, warm_size=3)
    )
    assert sorted(step.create_warm) == ["a", "b", "c"]
    assert not step.create
    assert not step.start
    booting = [warm(10, state=InstanceState.PENDING), warm(11, "b"), warm(12, "c")]
    step = plan(
        PlanInput(
            [*pool(3), *booting],
            replicas=3,
            surge=1,
            unavailable=0,
            failure_domains=FDS,
            warm_size=3,
        )
    )
    assert step.empty  # a warm instance still booting counts; it is not started


def test_outdated_failed_and_surplus_warm_instances_are_deleted_directly() -> None:
    members = [
        *pool(2),
        warm(10, state=InstanceState.FAILED),
        warm(11, "b"),
        warm(12, "c"),
        warm(13, "a"),
        warm(14, up_to_date=False),  # the newest, of an old template
    ]
    step = plan(
        PlanInput(members, replicas=2, surge=1, unavailable=0, failure_domains=FDS, warm_size=2)
    )
    # Failed and outdated go whatever the size; then the oldest beyond it.
    assert sorted(step.delete_warm) == ["m010", "m011", "m014"]
    assert not step.delete
    assert not step.create_warm
    assert not step.start


def _simulate_warm(
    members: list[Member], replicas: int, surge: int, unavailable: int, warm_size: int
) -> tuple[list[Member], int]:
    """As ``_simulate``, with warm instances: created ones boot stopped by the next step, and
    started ones join Ready. Returns the final members and how many instances joined the
    pool by a start. Checks, at every step, that warm instances never count as members, that
    only stopped up-to-date ones are started, and that the surge bound holds with them."""
    serial = 2000
    joined_warm = 0
    for _ in range(200):
        step = plan(
            PlanInput(
                members,
                replicas,
                surge,
                unavailable,
                DeletePolicy.OLDEST,
                FDS,
                seed="pool-uid",
                warm_size=warm_size,
            )
        )
        if step.empty:
            return members, joined_warm
        by_id = {m.id: m for m in members}
        assert all(by_id[i].prepared for i in step.start), step
        assert not set(step.start) & set(step.delete_warm)
        assert all(not by_id[i].warm for i in step.delete), step
        assert all(by_id[i].warm for i in step.delete_warm), step
        assert len(step.start) + len(step.create) + len(step.create_warm) <= BURST
        running = sum(1 for m in members if m.running and m.id not in step.delete)
        outdated = any(not m.up_to_date for m in members if m.active)
        if outdated:
            assert running + len(step.start) + len(step.create) <= replicas + surge, step
        gone = set(step.delete) | set(step.delete_warm)
        members = [
            replace(m, warm=False, state=InstanceState.RUNNING, ready=True, has_machine=True)
            if m.id in step.start
            else m
            for m in members
            if m.id not in gone
        ]
        joined_warm += len(step.start)
        for fd in step.create:
            serial += 1
            members.append(member(serial, fd))
        for fd in step.create_warm:
            serial += 1
            members.append(warm(serial, fd))
    raise AssertionError("pool never settled")


@settings(max_examples=150, deadline=None)
@given(
    start=st.lists(st.tuples(st.sampled_from(FDS), st.booleans(), st.booleans()), max_size=8),
    warm_start=st.lists(
        st.tuples(
            st.sampled_from(FDS),
            st.booleans(),
            st.sampled_from([InstanceState.STOPPED, InstanceState.PENDING, InstanceState.FAILED]),
        ),
        max_size=6,
    ),
    replicas=st.integers(0, 10),
    surge=st.integers(0, 3),
    unavailable=st.integers(0, 3),
    warm_size=st.integers(0, 5),
)
# A rollout its surge holds back keeps the up-to-date warm instance for its replacement,
# rather than trimming it (warm size 0) and booting a new one a step later.
@example(
    start=[("a", False, False), ("a", False, False)],
    warm_start=[("a", True, InstanceState.STOPPED)],
    replicas=1,
    surge=1,
    unavailable=0,
    warm_size=0,
)
def test_any_pool_with_a_warm_pool_converges_to_replicas_and_warm_size_up_to_date(
    start: list[tuple[str, bool, bool]],
    warm_start: list[tuple[str, bool, InstanceState]],
    replicas: int,
    surge: int,
    unavailable: int,
    warm_size: int,
) -> None:
    if surge == 0 and unavailable == 0:
        unavailable = 1
    members = [
        member(
            i,
            fd,
            up_to_date=fresh,
            state=InstanceState.FAILED if broken else InstanceState.RUNNING,
            ready=not broken,
        )
        for i, (fd, fresh, broken) in enumerate(start)
    ] + [
        warm(100 + i, fd, up_to_date=fresh, state=state)
        for i, (fd, fresh, state) in enumerate(warm_start)
    ]
    # Warm instances still booting finish by the plan after next: the simulation settles
    # only once none is pending, so boot them now (the plan treats pending ones as warm).
    members = [
        replace(m, state=InstanceState.STOPPED)
        if m.warm and m.state is InstanceState.PENDING
        else m
        for m in members
    ]
    prepared = sum(1 for m in members if m.prepared)
    final, joined = _simulate_warm(members, replicas, surge, unavailable, warm_size)
    pool_members = [m for m in final if not m.warm]
    warm_members = [m for m in final if m.warm]
    assert len(pool_members) == replicas
    assert all(m.up_to_date and m.state is InstanceState.RUNNING for m in pool_members)
    assert len(warm_members) == warm_size
    assert all(m.prepared for m in warm_members)
    # A scale-up uses the warm instances it had before creating any: as many joined by a
    # start as were prepared and needed.
    needed = replicas - sum(1 for m in members if m.active and m.up_to_date)
    assert joined >= min(prepared, max(0, needed))


def test_on_delete_replaces_only_deleted_outdated_instances_at_once() -> None:
    """Strategy OnDelete: the pool never picks an outdated instance itself, and an outdated
    one whose Machine someone deleted is replaced at once, while it still runs (the core's
    rollout holds it at a pre-drain hook until the replacement is Ready)."""
    old = pool(3, up_to_date=False)
    still = plan(PlanInput(old, 3, 0, 0, failure_domains=FDS, replace_outdated=False))
    assert still.empty
    held = [replace(old[0], deleting=True), *old[1:]]
    step = plan(PlanInput(held, 3, 0, 0, failure_domains=FDS, replace_outdated=False))
    assert (step.delete, len(step.create)) == ([], 1)
