"""``machinepool timeline``: ready nodes by version over time, as a PNG or an HTML page.

Samples come from the pool's recorded status history (``machinepool.cli.history``); the pool's
Events are drawn as markers so a reader sees why the curve moved.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from machinepool.api.kinds import MACHINES
from machinepool.cli import history
from machinepool.cli.kube import CliError, Target, connect, get_pool
from machinepool.runtime.kube.client import CORE_EVENTS, Client

Obj = dict[str, Any]


def series(samples: list[Obj]) -> tuple[list[float], dict[str, list[int]], list[int]]:
    """Times (seconds from the first sample), instances per version, and desired replicas."""
    if not samples:
        return [], {}, []
    start = samples[0]["t"]
    versions = sorted({v for s in samples for v in s["versions"]})
    times = [s["t"] - start for s in samples]
    by_version = {v: [int(s["versions"].get(v, 0)) for s in samples] for v in versions}
    desired = [int(s.get("desired") or 0) for s in samples]
    return times, by_version, desired


REMEDIATION_EVENT = "RemediatingMachine"
MARKED_UNHEALTHY_EVENT = "MachineMarkedUnhealthy"


def _stamp(event: Obj) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime") or "")


async def _events(client: Client, pool: Obj) -> list[tuple[str, str]]:
    """The pool's own Events, and the health checks' verdicts on its Machines.

    A Machine's ``MachineMarkedUnhealthy`` Event belongs to the pool when the Machine is
    still the pool's, or when the pool's ``RemediatingMachine`` Event named it (the Machine
    itself is gone by then).
    """
    meta = pool["metadata"]
    selector = f"involvedObject.uid={meta['uid']}"
    events = (await client.list(CORE_EVENTS, meta["namespace"], field_selector=selector)).items
    stamped = [(_stamp(e), str(e.get("reason", ""))) for e in events]
    remediated = " ".join(
        str(e.get("message", "")) for e in events if e.get("reason") == REMEDIATION_EVENT
    )
    marked = await client.list(
        CORE_EVENTS,
        meta["namespace"],
        field_selector=f"reason={MARKED_UNHEALTHY_EVENT},involvedObject.kind=Machine",
    )
    owned = await _machine_names(client, pool)
    for event in marked.items:
        machine = str((event.get("involvedObject") or {}).get("name", ""))
        if machine in owned or f"Machine {machine} " in remediated:
            stamped.append((_stamp(event), f"{MARKED_UNHEALTHY_EVENT} Machine/{machine}"))
    return sorted(stamped)


async def _machine_names(client: Client, pool: Obj) -> set[str]:
    meta = pool["metadata"]
    listed = await client.list(
        MACHINES,
        meta["namespace"],
        label_selector=f"cluster.x-k8s.io/cluster-name={pool['spec']['clusterName']}",
    )
    return {
        m["metadata"]["name"]
        for m in listed.items
        if any(o.get("uid") == meta["uid"] for o in m["metadata"].get("ownerReferences") or [])
    }


def render_png(samples: list[Obj], title: str) -> bytes:
    times, by_version, desired = series(samples)
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
    if times:
        ax.stackplot(times, *by_version.values(), labels=list(by_version), step="post", alpha=0.8)
        ax.step(times, desired, where="post", color="black", linestyle="--", label="desired")
    ax.set_xlabel("seconds since first sample")
    ax.set_ylabel("instances")
    ax.set_title(title)
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _versions(sample: Obj) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(sample["versions"].items()))


def render_html(samples: list[Obj], title: str, events: list[tuple[str, str]]) -> str:
    png = base64.b64encode(render_png(samples, title)).decode()
    rows = "".join(
        f"<tr><td>{s['t']:.1f}</td><td>{html.escape(s['phase'])}</td><td>{s['desired']}</td>"
        f"<td>{s['ready']}</td><td>{s['upToDate']}</td>"
        f"<td>{html.escape(_versions(s))}</td></tr>"
        for s in samples
    )
    event_rows = "".join(f"<li>{html.escape(t)} {html.escape(r)}</li>" for t, r in events)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "</head><body>"
        f"<h1>{html.escape(title)}</h1><img alt='timeline' src='data:image/png;base64,{png}'>"
        "<h2>Samples</h2><table border='1'><tr><th>t</th><th>phase</th><th>desired</th>"
        f"<th>ready</th><th>up to date</th><th>versions</th></tr>{rows}</table>"
        f"<h2>Events</h2><ul>{event_rows}</ul></body></html>"
    )


async def write_timeline(target: Target, name: str, output: Path) -> int:
    """Write the timeline of pool ``name``; return how many samples it holds."""
    async with connect(target) as client:
        pool = await get_pool(client, name, target.namespace)
        events = await _events(client, pool)
    samples = history.load(target.namespace, name)
    if not samples:
        raise CliError(
            f"no recorded history for machinepool/{name}: follow a rollout with "
            f"'machinepool rollout status {name}' (or run the demo) first"
        )
    title = f"machinepool/{name}: instances by version"
    if output.suffix == ".png":
        output.write_bytes(render_png(samples, title))
    else:
        output.write_text(render_html(samples, title, events))
    return len(samples)
