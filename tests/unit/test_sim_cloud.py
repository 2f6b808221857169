"""The simulated cloud as a cloud: a zone that refused a create for lack of capacity is left
alone for a while, per pool; the cloud refuses creates in a zone its faults list as short and a
reused id that asks for a different instance; instances boot with a spread and some break after
booting."""

from __future__ import annotations

import random
import typing
from datetime import UTC, datetime

import pytest
from tests.support.clock import ManualClock
from tests.unit.test_sim_records import record

from machinepool.api.infra_sim import DEFAULT_SIM_INSTANCE_TYPE, SIM_INSTANCE_TYPES, SimInstanceType
from machinepool.api.views import SimSettingsView
from machinepool.providers.pool.capacity import ZoneShortages
from machinepool.providers.pool.types import CloudError, InstanceSpec
from machinepool.providers.sim.backend import SimPoolSettings, _same_request
from machinepool.simworld import Faults, RequestLimits


def test_a_short_zone_is_skipped_until_its_time_is_up_then_forgotten() -> None:
    clock = ManualClock(1000.0)
    shortages = ZoneShortages(retry_after=120, clock=clock)
    shortages.record("zone-a")
    clock.now += 60
    shortages.record("zone-b")
    assert shortages.current() == {"zone-a", "zone-b"}
    clock.now += 61
    assert shortages.current() == {"zone-b"}
    clock.now += 60
    assert shortages.current() == frozenset()


def test_short_zones_round_trip_through_the_faults_configmap() -> None:
    faults = Faults(short_zones=frozenset({"zone-b", "zone-a"}))
    data = faults.to_configmap()
    assert data["insufficientCapacityZones"] == "zone-a,zone-b"
    assert Faults.from_configmap(data) == faults
    assert Faults.from_configmap({"insufficientCapacityZones": " zone-c , "}).short_zones == {
        "zone-c"
    }
    assert Faults.from_configmap({}).short_zones == frozenset()


def _spec(**changes: str) -> InstanceSpec:
    fields = {"pool_id": "pool", "failure_domain": "zone-b", "template_hash": "h1"} | changes
    return InstanceSpec(
        instance_id="pool-abcde-3",
        index=3,
        version="v1.34.4",
        bootstrap_data=b"",
        **fields,  # type: ignore[arg-type]
    )


def test_a_repeated_create_of_the_same_instance_is_a_retry() -> None:
    _same_request(record(), _spec())


@pytest.mark.parametrize(
    ("field", "value"),
    [("failure_domain", "zone-a"), ("template_hash", "h2"), ("pool_id", "elsewhere")],
)
def test_a_repeated_create_asking_for_another_instance_is_refused(field: str, value: str) -> None:
    with pytest.raises(CloudError, match="IdempotentParameterMismatch") as err:
        _same_request(record(), _spec(**{field: value}))
    assert value in str(err.value)


def test_an_instance_fate_follows_the_pool_settings() -> None:
    """Boot delays spread over [delay, delay + spread]; failAfterBootRate instances break
    within the window after booting; by default an instance boots in 20-60 s, as a cloud's
    do, and never breaks; ``bootDelaySeconds: 0`` alone boots at once."""
    rng = random.Random(7)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    settings = SimPoolSettings(
        SimSettingsView(
            {
                "bootDelaySeconds": 5,
                "bootDelaySpreadSeconds": 10,
                "failAfterBootRate": 0.5,
                "failAfterBootWithinSeconds": 30,
            }
        )
    )
    fates = [settings.fate(now, rng) for _ in range(400)]
    delays = [(boot - now).total_seconds() for boot, _, _ in fates]
    assert 5 <= min(delays) < 6
    assert 14 < max(delays) <= 15
    breaking = [(fail - boot).total_seconds() for boot, _, fail in fates if fail is not None]
    assert 150 < len(breaking) < 250
    assert all(0 <= s <= 30 for s in breaking)
    assert not any(will_fail for _, will_fail, _ in fates)
    unset = [SimPoolSettings(SimSettingsView({})).fate(now, rng) for _ in range(200)]
    unset_delays = [(boot - now).total_seconds() for boot, _, _ in unset]
    assert 20 <= min(unset_delays) < 25
    assert 55 < max(unset_delays) <= 60
    assert not any(will_fail or fail for _, will_fail, fail in unset)
    at_once = SimPoolSettings(SimSettingsView({"bootDelaySeconds": 0})).fate(now, rng)
    assert at_once == (now, False, None)


def test_the_cloud_throttles_an_account_beyond_its_rate_after_a_burst() -> None:
    clock = ManualClock(1000.0)
    limits = RequestLimits(clock=clock)
    throttled = Faults(request_rate=2, request_burst=3)
    assert [limits.admit("ns", throttled) for _ in range(4)] == [True, True, True, False]
    assert limits.admit("other", throttled)
    clock.now += 0.5
    assert [limits.admit("ns", throttled) for _ in range(2)] == [True, False]
    assert all(limits.admit("free", Faults()) for _ in range(100))
    clock.now += 10  # both buckets filled up again: nothing is kept for them
    assert limits.admit("ns", Faults())
    assert len(limits) == 0


def test_the_instance_type_catalogue_is_what_admission_accepts() -> None:
    """Every type the CRD's enum admits has a capacity, and nothing else does."""
    assert set(typing.get_args(SimInstanceType)) == set(SIM_INSTANCE_TYPES)
    assert DEFAULT_SIM_INSTANCE_TYPE in SIM_INSTANCE_TYPES
    for capacity in SIM_INSTANCE_TYPES.values():
        assert set(capacity) == {"cpu", "memory", "pods", "ephemeral-storage"}
