"""Pure figures of the soak benchmark: is a series flat, or does it grow, and how fast.

A soak samples each process's footprint (RSS, asyncio tasks, descriptors, informer objects)
many times over a long churn. ``summarize`` reduces one series to first, last, min, max and a
least-squares slope in units per hour, and decides whether it grew: a leak shows as a steady
slope, where noise (a GC cycle, a scrape in flight) shows as spikes that a fit mostly ignores.
A series grew when the fitted growth over the run, last - first, and the growth its
second half's slope would make over the whole run all exceed its ``Tolerance``: one spike at
the end is not a trend, nor is a slope fitted to noise, nor a step up early on that then
stays flat (a connection pool or a cache reaching its working size) -- that one is reported
as "rose, then flat", so a reader sees it happened and that it stopped.

Called by ``bench/bench_soak.py``; unit-tested in tests/unit/test_bench_soak.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Point = tuple[float, float]
"""(seconds since the soak started, value)."""


@dataclass(frozen=True)
class Tolerance:
    """How much a series may move over a run and still be flat: the larger of ``absolute``
    (in the series' unit) and ``relative`` times its first value."""

    absolute: float
    relative: float = 0.0

    def of(self, first: float) -> float:
        return max(self.absolute, self.relative * abs(first))


@dataclass(frozen=True)
class Summary:
    """One series over a run; ``slope_per_hour`` in its unit per hour, ``growth`` the fitted
    change from the first to the last sample's time."""

    samples: int
    first: float
    last: float
    low: float
    high: float
    slope_per_hour: float
    late_slope_per_hour: float
    """The slope over the second half of the run (by time)."""
    growth: float
    grew: bool
    rose: bool
    """Grew over the run as a whole, but not in its second half."""


def slope(points: Sequence[Point]) -> float:
    """Least-squares slope (units per second) of ``points``; 0 for fewer than two distinct
    times (nothing to fit)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / spread


def summarize(points: Sequence[Point], tolerance: Tolerance) -> Summary:
    """First, last, min, max, slope per hour and whether ``points`` grew (see the module)."""
    if not points:
        raise ValueError("no samples to summarize")
    ordered = sorted(points)
    values = [v for _, v in ordered]
    per_second = slope(ordered)
    span = ordered[-1][0] - ordered[0][0]
    growth = per_second * span
    late = [p for p in ordered if p[0] >= ordered[0][0] + span / 2]
    late_per_second = slope(late) if len(late) >= 2 else per_second
    allowed = tolerance.of(values[0])
    rose = growth > allowed and values[-1] - values[0] > allowed
    grew = rose and late_per_second * span > allowed
    return Summary(
        samples=len(values),
        first=values[0],
        last=values[-1],
        low=min(values),
        high=max(values),
        slope_per_hour=per_second * 3600,
        late_slope_per_hour=late_per_second * 3600,
        growth=growth,
        grew=grew,
        rose=rose and not grew,
    )


def _num(value: float) -> str:
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _signed(value: float) -> str:
    text = _num(round(value, 2))
    return text if value < 0 or text in ("0", "0.00") else f"+{text}"


def table(summaries: Mapping[str, Summary], peaks: Mapping[str, float]) -> str:
    """A Markdown table of every series, growing ones marked; ``peaks``: the highest value
    seen mid-churn (between the samples ``summaries`` were made of), where measured."""
    lines = [
        "| series | samples | first | last | min | max | peak mid-churn | slope per hour "
        "| slope per hour, 2nd half | grew |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, s in summaries.items():
        peak = peaks.get(name)
        lines.append(
            f"| {name} | {s.samples} | {_num(s.first)} | {_num(s.last)} | {_num(s.low)} | "
            f"{_num(s.high)} | {'-' if peak is None else _num(peak)} | "
            f"{_signed(s.slope_per_hour)} | {_signed(s.late_slope_per_hour)} | {_state(s)} |"
        )
    return "\n".join(lines)


def _state(s: Summary) -> str:
    if s.grew:
        return "**yes**"
    return "rose, then flat" if s.rose else "no"


def verdict(summaries: Mapping[str, Summary]) -> str:
    """One sentence: nothing grew, or which series did and by how much per hour."""
    grown = [(name, s) for name, s in summaries.items() if s.grew]
    rose = [name for name, s in summaries.items() if s.rose]
    then = f" ({len(rose)} rose early, then stayed flat: {', '.join(rose)})" if rose else ""
    if not grown:
        return (
            f"Nothing grew: all {len(summaries)} series stayed within their tolerance"
            f" through the second half of the run{then}."
        )
    listed = "; ".join(f"{name} ({_signed(s.slope_per_hour)} per hour)" for name, s in grown)
    return f"{len(grown)} of {len(summaries)} series grew: {listed}{then}."
