"""Objects as our controllers write them, shared by the benchmarks that replay their writes.

``instance_record`` is a running Sim instance as the cloud records it. ``machine_status`` is
the status the Machine controller writes for a Ready Machine: the ten v1beta2 conditions the
contract gives every Machine and the three v1beta1 ones kept for older clients. Its weight,
not the patch's, is what a Machine status write costs the apiserver
(``bench_apiserver_writes.py`` measures it; ``bench_write_floor.py`` replays it).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from machinepool.simworld.records import InstanceRecord, allocate_address, hostname_of, provider_id

EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
ZONE = "zone-a"

CONDITIONS = (
    "Paused",
    "BootstrapConfigReady",
    "InfrastructureReady",
    "NodeHealthy",
    "Deleting",
    "Updating",
    "NodeReady",
    "Ready",
    "Available",
    "UpToDate",
)


def machine_status(round_: int) -> dict[str, Any]:
    """The status the core writes for a Ready Machine; NodeReady flips each round."""
    stamp = f"2026-01-01T00:{round_ // 60 % 60:02d}:{round_ % 60:02d}Z"
    flip = round_ % 2 == 0
    conditions = [
        {
            "type": t,
            "status": "True" if (t != "NodeReady" or flip) else "False",
            "reason": t if (t != "NodeReady" or flip) else "NodeNotReady",
            "message": "",
            "observedGeneration": 1,
            "lastTransitionTime": stamp,
        }
        for t in CONDITIONS
    ]
    deprecated = [
        {"type": t, "status": "True", "lastTransitionTime": stamp}
        for t in ("Ready", "InfrastructureReady", "NodeHealthy")
    ]
    return {
        "status": {
            "phase": "Running",
            "nodeRef": {"name": "ip-10-0-0-1.sim.internal"},
            "conditions": conditions,
            "deprecated": {"v1beta1": {"conditions": deprecated}},
        }
    }


def instance_record(
    instance_id: str, pool: str, index: int, taken: set[str], *, uid: str = ""
) -> InstanceRecord:
    """Instance ``index`` of ``pool`` in namespace and cluster ``bench``, booted at ``EPOCH``
    (so running); its private address is one not in ``taken`` (the Sim cloud's rule: one
    network per namespace), added to it, and its hostname follows from the address."""
    address = allocate_address("bench", instance_id, taken.__contains__)
    taken.add(address)
    return InstanceRecord(
        namespace="bench",
        id=instance_id,
        pool=pool,
        index=index,
        cluster="bench",
        failure_domain=ZONE,
        provider_id=provider_id(ZONE, instance_id),
        template_hash="h",
        version="v1.34.4",
        created=EPOCH,
        boot_at=EPOCH,
        will_fail=False,
        bootstrap_version="1",
        forced_state="",
        attributes={},
        uid=uid,
        private_ip=address,
        hostname=hostname_of(address),
    )
