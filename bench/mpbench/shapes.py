"""Objects as our controllers write them, shared by the benchmarks that replay their writes.

``machine_status`` is the status the Machine controller writes for a Ready Machine: the ten
v1beta2 conditions the contract gives every Machine and the three v1beta1 ones kept for
older clients. Its weight, not the patch's, is what a Machine status write costs the
apiserver (``bench_apiserver_writes.py`` measures it; ``bench_write_floor.py`` replays it).
"""

from __future__ import annotations

from typing import Any

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
