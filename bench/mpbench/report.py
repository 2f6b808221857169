"""Side-by-side tables on stdout and in bench/RESULTS.md.

``table`` renders rows of figures for ours / upstream with their ratio; ``update_results``
rewrites one marked section of RESULTS.md (``<!-- bench:NAME -->`` ... ``<!-- /bench:NAME -->``)
and the machine/versions header, leaving the other sections as the last run of that mode left
them; ``publish`` does both and keeps the raw figures. ``machine_info`` says where the numbers
came from. Used by every benchmark script.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from machinepool.controlplane import KUBERNETES_VERSION, upstream

RESULTS = Path(__file__).resolve().parent.parent / "RESULTS.md"
REPO = RESULTS.parent.parent
OUT = RESULTS.parent / "out"
"""Raw figures of each run, as JSON (not committed)."""

Row = tuple[str, float | None, float | None]
"""(figure, ours, upstream); None: not measured."""


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if value == int(value) and abs(value) >= 10:
        return f"{int(value):,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def ratio(ours: float | None, upstream: float | None) -> str:
    if ours is None or upstream is None or upstream == 0:
        return "-"
    return f"{ours / upstream:.2f}x"


def table(rows: Sequence[Row], *, upstream: bool) -> str:
    """A Markdown table (readable as plain text too)."""
    if upstream:
        lines = ["| figure | ours | upstream | ours / upstream |", "|---|---:|---:|---:|"]
        lines += [f"| {f} | {fmt(o)} | {fmt(u)} | {ratio(o, u)} |" for f, o, u in rows]
    else:
        lines = ["| figure | ours |", "|---|---:|"]
        lines += [f"| {f} | {fmt(o)} |" for f, o, _ in rows]
    return "\n".join(lines)


def _run(argv: Sequence[str], cwd: Path | None = None) -> str:
    try:
        out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (out.stdout or out.stderr).strip().splitlines()[0] if out.returncode == 0 else "?"


def git_revision() -> str:
    """``git <short sha>`` of the checkout being measured (``git ?`` outside git)."""
    return f"git {_run(['git', 'rev-parse', '--short', 'HEAD'], REPO)}"


def machine_info() -> list[tuple[str, str]]:
    meminfo = Path("/proc/meminfo").read_text()
    mem_kb = int(re.search(r"MemTotal:\s+(\d+)", meminfo).group(1))  # type: ignore[union-attr]
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"model name\s*:\s*(.+)", cpuinfo)
    return [
        ("nproc", str(os.cpu_count())),
        ("memory", f"{mem_kb / 1024 / 1024:.1f} GiB"),
        ("cpu", model.group(1).strip() if model else platform.processor() or "?"),
        ("kernel", platform.release()),
        ("python", sys.version.split()[0]),
        ("go", _run(["go", "env", "GOVERSION"])),
        ("kube-apiserver / etcd", f"{KUBERNETES_VERSION} (hack/controlplane)"),
        (
            "upstream Cluster API",
            f"{upstream.version()} (core manager, bench/upstream/)",
        ),
        ("machinepool", git_revision()),
    ]


def _header(commands: Sequence[str]) -> str:
    rows = "\n".join(f"| {k} | {v} |" for k, v in machine_info())
    cmds = "\n".join(commands)
    return f"""# Benchmark results: MachinePool system, ours and upstream Cluster API

Written by `bench/bench_machinepool.py` (each mode rewrites its own section; the header is
rewritten by every run). Goals, not assertions: see bench/README.md for what each figure
means and how it is measured.

## Machine and versions (last run)

| | |
|---|---|
{rows}

Last command(s):

```
{cmds}
```
"""


def publish(section: str, body: str, command: str, *, data: Any = None, results: bool) -> None:
    """How every benchmark ends: print ``body``; keep ``data`` (the raw figures, if any) as
    JSON in bench/out/, named by the time and ``section``; and, when ``results`` (no
    ``--no-results``), rewrite ``section`` of RESULTS.md with ``body`` and ``command``."""
    if data is not None:
        OUT.mkdir(exist_ok=True)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
        (OUT / f"{stamp}-{section}.json").write_text(json.dumps(data, indent=2, default=str))
    print("\n" + body.strip() + "\n", flush=True)
    if results:
        update_results(section, body, [command])


def update_results(section: str, body: str, commands: Sequence[str]) -> None:
    """Replace ``section`` of RESULTS.md with ``body`` and refresh the header."""
    text = RESULTS.read_text() if RESULTS.exists() else ""
    start, end = f"<!-- bench:{section} -->", f"<!-- /bench:{section} -->"
    block = f"{start}\n{body.strip()}\n{end}"
    sections = re.findall(r"<!-- bench:([\w-]+) -->.*?<!-- /bench:\1 -->", text, flags=re.S)
    blocks = {}
    for name in sections:
        found = re.search(rf"<!-- bench:{name} -->.*?<!-- /bench:{name} -->", text, flags=re.S)
        if found is not None:
            blocks[name] = found.group(0)
    blocks[section] = block
    order = ["convergence", "latency", "scale-a", "scale-b", "scale-c", "scale"]
    ordered = [blocks[n] for n in order if n in blocks]
    ordered += [b for n, b in blocks.items() if n not in order]
    RESULTS.write_text(_header(commands) + "\n" + "\n\n".join(ordered) + "\n")
