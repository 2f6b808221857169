"""The Event recorder's per-object spam filter (client-go's: a burst, then one per refill)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from machinepool.runtime import Client, EventRecorder
from machinepool.runtime.kube import events as events_module


def test_spam_filter_allows_a_burst_per_object_then_one_per_refill(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(events_module.time, "monotonic", lambda: clock[0])
    recorder = EventRecorder(cast(Client, None), "c", spam_burst=3, spam_refill=10.0)
    pool: dict[str, Any] = {"metadata": {"uid": "u1", "name": "p", "namespace": "ns"}}
    other: dict[str, Any] = {"metadata": {"uid": "u2", "name": "q", "namespace": "ns"}}
    ref, other_ref = events_module._regarding(pool), events_module._regarding(other)
    assert [recorder._allowed(ref) for _ in range(4)] == [True, True, True, False]
    assert recorder._allowed(other_ref), "each object has its own bucket"
    clock[0] += 10.0
    assert recorder._allowed(ref), "one token back per refill period"
    assert not recorder._allowed(ref)
