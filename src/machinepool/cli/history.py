"""A pool's status over time, as the CLI observed it, for ``machinepool timeline``.

The API keeps only the current status, so whenever the CLI follows a pool (``demo``,
``rollout status``) it appends compact samples here: ``HOME/history/<ns>_<name>.jsonl``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from machinepool.cli.local import default_home


def history_file(namespace: str, name: str, home: Path | None = None) -> Path:
    return (home or default_home()) / "history" / f"{namespace}_{name}.jsonl"


def sample(pool: dict[str, Any], at: float | None = None) -> dict[str, Any]:
    """The fields a timeline needs from one observation of a pool."""
    status = pool.get("status") or {}
    return {
        "t": round(at if at is not None else time.time(), 3),
        "desired": pool.get("spec", {}).get("replicas"),
        "ready": status.get("readyReplicas", 0),
        "upToDate": status.get("upToDateReplicas", 0),
        "phase": status.get("phase", ""),
        "versions": {v["version"]: v.get("replicas", 0) for v in status.get("versions") or []},
    }


def record(namespace: str, name: str, pool: dict[str, Any], home: Path | None = None) -> None:
    """Append a sample unless it equals the previous one (apart from its time)."""
    path = history_file(namespace, name, home)
    path.parent.mkdir(parents=True, exist_ok=True)
    new = sample(pool)
    last = load(namespace, name, home)[-1:] if path.exists() else []
    if last and {**last[0], "t": 0} == {**new, "t": 0}:
        return
    with path.open("a") as fh:
        fh.write(json.dumps(new) + "\n")


def load(namespace: str, name: str, home: Path | None = None) -> list[dict[str, Any]]:
    path = history_file(namespace, name, home)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
