"""Side-by-side tables on stdout and in bench/RESULTS.md.

``table`` renders rows of figures for ours / upstream with their ratio. ``publish`` is how
every benchmark script ends: it prints the figures, keeps the raw ones as JSON, and replaces
the script's own block of RESULTS.md (``<!-- bench:NAME -->`` ... ``<!-- /bench:NAME -->``):
the section's heading, a table of the command, git revision, date and machine it was
measured with, and the figures. Everything outside that block (the other benchmarks' blocks,
the hand-written "why" after each block, the page's introduction) is left as it was, so a
rerun replaces today's figure and nothing else; the history is git's.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from machinepool.controlplane import KUBERNETES_VERSION, upstream

RESULTS = Path(__file__).resolve().parent.parent / "RESULTS.md"
REPO = RESULTS.parent.parent
OUT = RESULTS.parent / "out"
"""Raw figures of each run, as JSON (not committed)."""

Row = tuple[str, float | None, float | None]
"""(figure, ours, upstream); None: not measured."""


@dataclass(frozen=True)
class Run:
    """Where a section's figures came from, as its run table shows it."""

    command: str
    revision: str
    date: str
    machine: str


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
    """``git <short sha>`` of the checkout being measured (``git ?`` outside git), with
    ``+ uncommitted changes`` when tracked files other than RESULTS.md differ from it: the
    figures then belong to no revision anyone can check out."""
    sha = _run(["git", "rev-parse", "--short", "HEAD"], REPO)
    own = RESULTS.relative_to(REPO) if RESULTS.is_relative_to(REPO) else RESULTS
    try:
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", f":(exclude){own}"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        status = ""
    return f"git {sha}" + (" + uncommitted changes" if status.strip() else "")


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


def host() -> str:
    """The machine and versions in one line, for a section's run table."""
    info = dict(machine_info())
    return (
        f"{info['nproc']} cores, {info['memory']}, {info['cpu']}; kernel {info['kernel']};"
        f" Python {info['python']}; kube-apiserver/etcd {KUBERNETES_VERSION};"
        f" upstream Cluster API {upstream.version()}"
    )


def section(name: str, title: str, body: str, run: Run) -> str:
    """A benchmark's block of RESULTS.md: its heading, the run it came from, its figures.

    Only this block is the script's; what follows its end marker (the section's "why",
    written by hand) is kept when the benchmark runs again."""
    return "\n".join(
        [
            f"<!-- bench:{name} -->",
            f"## {title}",
            "",
            "| command | git revision | date | machine |",
            "|---|---|---|---|",
            f"| `{run.command}` | {run.revision} | {run.date} | {run.machine} |",
            "",
            body.strip(),
            f"<!-- /bench:{name} -->",
        ]
    )


def replace_section(text: str, name: str, block: str) -> str:
    """``text`` with the block of ``name`` replaced by ``block``, in place; a section not yet
    in ``text`` goes at the end. Nothing outside that one block changes."""
    found = re.search(
        rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", text, flags=re.S
    )
    if found is None:
        return (text.rstrip("\n") + "\n\n" if text.strip() else "") + block + "\n"
    return text[: found.start()] + block + text[found.end() :]


def publish(
    name: str, title: str, body: str, command: str, *, data: Any = None, results: bool
) -> None:
    """How every benchmark ends: print ``body``; keep ``data`` (the raw figures, if any) as
    JSON in bench/out/, named by the time and ``name``; and, when ``results`` (no
    ``--no-results``), replace section ``name`` of RESULTS.md with ``title`` and ``body``,
    under a table of ``command``, the git revision, the date and this machine with its load."""
    if data is not None:
        OUT.mkdir(exist_ok=True)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
        (OUT / f"{stamp}-{name}.json").write_text(json.dumps(data, indent=2, default=str))
    print("\n" + body.strip() + "\n", flush=True)
    if results:
        # The machine is shared: the load at the end says how much else ran meanwhile.
        load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
        run = Run(
            command=command,
            revision=git_revision().removeprefix("git "),
            date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            machine=f"{host()}; load average {load} (1/5/15 min) at the end",
        )
        text = RESULTS.read_text() if RESULTS.exists() else ""
        RESULTS.write_text(replace_section(text, name, section(name, title, body, run)))
