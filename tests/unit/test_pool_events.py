"""The pool engine's step Events: one per step and kind of change, named whole."""

from __future__ import annotations

from machinepool.providers.pool.scale import created_message, deleting_message, failed_message
from machinepool.providers.pool.types import InstanceSpec


def _spec(i: int, zone: str) -> InstanceSpec:
    return InstanceSpec(
        pool_id="ns/workers",
        instance_id=f"workers-{i}",
        index=i,
        failure_domain=zone,
        template_hash="h",
        version="v1.34.4",
        bootstrap_data=b"secret",
    )


def test_one_instance_reads_as_it_always_did() -> None:
    assert created_message([_spec(1, "zone-a")], "v1.34.4") == (
        "Created instance workers-1 in zone-a (v1.34.4)"
    )


def test_a_step_of_many_counts_them_by_zone_and_names_the_first_ten() -> None:
    specs = [_spec(i, "zone-a" if i % 2 else "zone-b") for i in range(1, 13)]
    message = created_message(specs, "v1.34.4")
    assert message.startswith("Created 12 instances (v1.34.4): zone-a 6, zone-b 6; workers-1, ")
    assert message.endswith("workers-10 and 2 more")
    assert "secret" not in message


def test_deletions_of_one_step_for_one_reason_are_one_note() -> None:
    assert deleting_message(["m-1"], "scale down to 2") == (
        "Deleting Machine m-1 (scale down to 2); its Node is drained first"
    )
    assert deleting_message(["m-1", "m-2"], "replaced by an up-to-date instance") == (
        "Deleting 2 Machines (replaced by an up-to-date instance): m-1, m-2; their Nodes are"
        " drained first"
    )


def test_creates_refused_alike_in_one_step_are_one_note() -> None:
    assert failed_message(["w-1"], "RequestLimitExceeded") == (
        "creating instance w-1 failed: RequestLimitExceeded"
    )
    ids = [f"w-{i}" for i in range(1, 41)]
    message = failed_message(ids, "RequestLimitExceeded")
    assert message.startswith("creating 40 instances failed: RequestLimitExceeded; w-1, w-2, ")
    assert message.endswith("w-10 and 30 more")
