"""Pure figures for the benchmark: percentiles, /proc parsing, Prometheus text, audit counts.

Called by the other ``mpbench`` modules; no I/O except ``read_proc``, ``read_open_files`` and
``AuditLog.read``.
Unit-tested in tests/unit/test_bench_stats.py.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
"""Verbs that change state (the apiserver's names, as audit events spell them)."""

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q} must be within 0..100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


# -- /proc ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcSample:
    """What one process has cost so far: CPU seconds (user+system), RSS now and at peak."""

    cpu_seconds: float
    rss_bytes: int
    peak_rss_bytes: int


def parse_proc_stat(text: str) -> float:
    """CPU seconds (utime + stime) from the text of /proc/<pid>/stat.

    The command name (field 2) may hold spaces and parentheses, so fields are counted from the
    last ')'; utime and stime are fields 14 and 15 in clock ticks.
    """
    rest = text[text.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state): field n is rest[n - 3].
    return (int(rest[11]) + int(rest[12])) / _CLOCK_TICKS


def parse_proc_status(text: str) -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes from the text of /proc/<pid>/status (0 when absent)."""
    values = {"VmRSS": 0, "VmHWM": 0}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in values:
            values[key] = int(rest.split()[0]) * 1024  # reported in kB
    return values["VmRSS"], values["VmHWM"]


def read_proc(pid: int) -> ProcSample:
    """Sample a live process; raises ``ProcessLookupError`` when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError as exc:
        raise ProcessLookupError(pid) from exc
    rss, hwm = parse_proc_status(status)
    return ProcSample(parse_proc_stat(stat), rss, hwm)


@dataclass(frozen=True)
class OpenFiles:
    """What one process holds open: file descriptors, those that are sockets, and its TCP
    connections in state ESTABLISHED by remote port (an apiserver's port, or a client's
    ephemeral one for connections the process accepted)."""

    fds: int
    sockets: int
    established: Mapping[int, int]
    """Remote port -> ESTABLISHED connections to it."""

    @property
    def tcp_established(self) -> int:
        return sum(self.established.values())


def socket_inodes(links: Iterable[str]) -> set[int]:
    """Inodes of the sockets among the targets of /proc/<pid>/fd/* (``socket:[12345]``)."""
    out = set()
    for link in links:
        if link.startswith("socket:[") and link.endswith("]"):
            out.add(int(link[len("socket:[") : -1]))
    return out


TCP_ESTABLISHED = "01"
"""The ``st`` column of /proc/net/tcp for ESTABLISHED (include/net/tcp_states.h)."""


def parse_net_tcp(text: str) -> dict[int, tuple[str, int]]:
    """Socket inode -> (state as printed in hex, remote port) from the text of
    /proc/<pid>/net/tcp or tcp6.

    Columns: sl, local_address, rem_address (``ADDR:PORT``, hex), st, tx_queue:rx_queue,
    tr:tm->when, retrnsmt, uid, timeout, inode; the table covers the whole network namespace,
    so callers keep only the inodes the process holds.
    """
    out: dict[int, tuple[str, int]] = {}
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 10 and fields[9].isdigit():
            out[int(fields[9])] = (fields[3], int(fields[2].rpartition(":")[2], 16))
    return out


def read_open_files(pid: int) -> OpenFiles:
    """Sample a live process's descriptors; raises ``ProcessLookupError`` when it is gone.

    A descriptor closed while the folder is read is skipped, not an error.
    """
    fd_dir = Path(f"/proc/{pid}/fd")
    links = []
    try:
        entries = list(fd_dir.iterdir())
    except FileNotFoundError as exc:
        raise ProcessLookupError(pid) from exc
    for entry in entries:
        try:
            links.append(os.readlink(entry))
        except FileNotFoundError:
            continue
    sockets = socket_inodes(links)
    states: dict[int, tuple[str, int]] = {}
    for table in ("tcp", "tcp6"):
        try:
            states.update(parse_net_tcp(Path(f"/proc/{pid}/net/{table}").read_text()))
        except FileNotFoundError:
            continue  # no IPv6 in this kernel, or the process just exited
    established: Counter[int] = Counter()
    for inode in sockets:
        state, port = states.get(inode, ("", 0))
        if state == TCP_ESTABLISHED:
            established[port] += 1
    return OpenFiles(len(links), len(sockets), dict(established))


# -- Prometheus text -----------------------------------------------------------------------


def prom_sum(text: str, name: str, match: Mapping[str, str] | None = None) -> float:
    """Sum of the samples called ``name`` whose labels include ``match``."""
    return sum(prom_by_label(text, name, (), match).values())


def prom_by_label(
    text: str, name: str, labels: Sequence[str], match: Mapping[str, str] | None = None
) -> dict[tuple[str, ...], float]:
    """Samples called ``name`` summed by the values of ``labels`` (those matching ``match``)."""
    out: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name != name:
                continue
            if match and any(sample.labels.get(k) != v for k, v in match.items()):
                continue
            key = tuple(sample.labels.get(label, "") for label in labels)
            out[key] = out.get(key, 0.0) + float(sample.value)
    return out


# -- audit logs ----------------------------------------------------------------------------

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
# One event per request, when it is received: verb, user, user agent and resource are known.
omitStages: ["ResponseStarted", "ResponseComplete", "Panic"]
rules:
- level: Metadata
"""
"""Audit policy for the benchmark: every request counted once, no bodies (no secrets)."""


def agent_of(user_agent: str) -> str:
    """The product part of a User-Agent: ``cluster-api-controller-manager/v1.14.2 (...)`` ->
    ``cluster-api-controller-manager``."""
    return user_agent.split("/", 1)[0].split(" ", 1)[0] or "-"


AuditKey = tuple[str, str, str, str]
"""(username, user-agent product, verb, resource): resource is ``plural`` or
``plural/subresource`` (``machines/status``), ``-`` for non-resource requests."""

REVIEWS = frozenset(
    {"tokenreviews", "subjectaccessreviews", "selfsubjectaccessreviews", "selfsubjectreviews"}
)
"""Created but never stored: questions to the apiserver, not writes."""


def resource_of(event: Mapping[str, object]) -> str:
    ref = event.get("objectRef")
    if not isinstance(ref, dict) or not ref.get("resource"):
        return "-"
    sub = ref.get("subresource")
    return f"{ref['resource']}/{sub}" if sub else str(ref["resource"])


def count_audit_lines(lines: Iterable[str]) -> Counter[AuditKey]:
    """Requests by (username, agent, verb, resource) from audit-log JSON lines (other lines
    skipped)."""
    counts: Counter[AuditKey] = Counter()
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line still being written
        if not isinstance(event, dict) or event.get("kind") != "Event":
            continue
        user = (event.get("user") or {}).get("username", "-")
        agent = agent_of(event.get("userAgent", ""))
        counts[(user, agent, event.get("verb", "-"), resource_of(event))] += 1
    return counts


class AuditLog:
    """Reads an apiserver audit log incrementally: each ``read`` counts what was added since."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def read(self) -> Counter[AuditKey]:
        if not self.path.exists():
            return Counter()
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # only whole lines; the rest is read next time
        self._offset += end
        return count_audit_lines(data[:end].decode(errors="replace").splitlines())


def is_write(key: AuditKey) -> bool:
    """A request that changes stored state (a review is created but never stored)."""
    verb, resource = key[2], key[3]
    return verb in WRITE_VERBS and resource not in REVIEWS


def writes(counts: Mapping[AuditKey, int], user: str | None = None) -> int:
    """Write requests in ``counts`` (of ``user`` when given)."""
    return sum(n for key, n in counts.items() if is_write(key) and user in (None, key[0]))


def by_verb(counts: Mapping[AuditKey, int], user: str | None = None) -> dict[str, int]:
    """Requests in ``counts`` by verb (of ``user`` when given), most frequent first."""
    out: Counter[str] = Counter()
    for (u, _, verb, _), n in counts.items():
        if user in (None, u):
            out[verb] += n
    return dict(out.most_common())


def writes_by_resource(counts: Mapping[AuditKey, int]) -> dict[str, int]:
    """Writes in ``counts`` by ``user verb resource``, most frequent first: where they go."""
    out: Counter[str] = Counter()
    for key, n in counts.items():
        if is_write(key):
            out[f"{key[0]} {key[2]} {key[3]}"] += n
    return dict(out.most_common())


# -- profiles ------------------------------------------------------------------------------


def hot_frames(
    collapsed: Iterable[str], contains: str = "", limit: int = 15
) -> list[tuple[str, float]]:
    """Frames by share of samples they appear in (inclusive), from py-spy's raw (collapsed)
    output: lines ``frame;frame;... count``, frames ``function (file:line)``. Only frames whose
    text includes ``contains`` count; each sample counts a frame once even if it recurses."""
    counts: Counter[str] = Counter()
    total = 0
    for line in collapsed:
        stack, _, n = line.rstrip().rpartition(" ")
        if not stack or not n.isdigit():
            continue
        total += int(n)
        for frame in set(stack.split(";")):
            if contains in frame:
                counts[frame] += int(n)
    if total == 0:
        return []
    return [(frame, n / total) for frame, n in counts.most_common(limit)]
