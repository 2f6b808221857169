"""HashRing and LiveLeases: the pure parts of sharding."""

from __future__ import annotations

from collections import Counter
from typing import Any

from machinepool.runtime import HashRing, LiveLeases, ObjectKey

KEYS = [f"ns-{i % 7}/cluster-{i}" for i in range(3000)]


def test_ring_spreads_keys_over_members() -> None:
    ring = HashRing(["a", "b", "c"])
    counts = Counter(ring.owner(k) for k in KEYS)
    assert set(counts) == {"a", "b", "c"}
    assert min(counts.values()) > len(KEYS) / 3 * 0.75, counts


def test_adding_a_member_moves_about_one_in_n() -> None:
    before = HashRing(["a", "b", "c"])
    after = HashRing(["a", "b", "c", "d"])
    moved = [k for k in KEYS if before.owner(k) != after.owner(k)]
    assert all(after.owner(k) == "d" for k in moved), "keys move only to the newcomer"
    assert len(moved) < len(KEYS) / 4 * 1.3


def test_removing_a_member_moves_only_its_keys() -> None:
    before = HashRing(["a", "b", "c"])
    after = HashRing(["a", "c"])
    assert [k for k in KEYS if before.owner(k) != after.owner(k)] == [
        k for k in KEYS if before.owner(k) == "b"
    ]


def test_empty_ring_owns_nothing() -> None:
    assert HashRing([]).owner("x") is None


class _Leases:
    """Just enough of an Informer for LiveLeases: a list of Lease objects."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}

    def list(self) -> list[dict[str, Any]]:
        return list(self.items.values())

    def renew(self, name: str, holder: str, at: str) -> None:
        self.items[name] = {
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"holderIdentity": holder, "renewTime": at, "leaseDurationSeconds": 15},
        }


def test_a_lease_lives_for_its_duration_after_its_last_observed_change() -> None:
    leases = _Leases()
    live = LiveLeases(leases)  # type: ignore[arg-type]
    leases.renew("r-a", "a", "t0")
    leases.renew("r-b", "b", "t0")
    assert live.live(now=100.0) == {"a", "b"}
    leases.renew("r-a", "a", "t1")  # a renews, b does not
    assert live.live(now=110.0) == {"a", "b"}
    assert live.live(now=116.0) == {"a"}, "b silent for 16 s > 15 s"
    assert live.expired(older_than=60.0, now=161.0) == [ObjectKey("ns", "r-b")]
    leases.renew("r-a", "a", "t2")
    leases.renew("r-b", "", "t2")  # released on shutdown: no holder
    assert live.live(now=162.0) == {"a"}
