"""Go parsers whose exact acceptance rules admission and conversion must share with upstream.

- ``parse_int32``: ``strconv.ParseInt(s, 10, 32)``, used for the autoscaler size annotations;
  its error text is part of upstream's rejection message.
- ``is_semver``: ``blang/semver.Parse``, which upstream uses for ``spec.template.spec.version``.
- ``parse_duration`` / ``format_duration``: ``time.ParseDuration`` and ``Duration.String``,
  the wire form of v1beta1's ``metav1.Duration`` timeouts.

Pure functions; the admission and conversion modules call them.
"""

from __future__ import annotations

import re

__all__ = ["format_duration", "is_semver", "parse_duration", "parse_int32"]

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def parse_int32(text: str) -> int:
    """Parse a base-10 int32 or raise ValueError worded like Go's strconv."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not body.isascii() or not body.isdigit():
        raise ValueError(f'strconv.ParseInt: parsing "{text}": invalid syntax')
    value = int(text)
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f'strconv.ParseInt: parsing "{text}": value out of range')
    return value


_DIGITS = frozenset("0123456789")
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789")
_UINT64_MAX = 2**64 - 1


def _number(part: str) -> bool:
    """A semver numeric field: digits only, no leading zero, fits uint64."""
    return (
        bool(part)
        and set(part) <= _DIGITS
        and not (len(part) > 1 and part[0] == "0")
        and int(part) <= _UINT64_MAX
    )


def is_semver(text: str) -> bool:
    """Whether ``text`` (without a ``v``) is a version blang/semver's strict ``Parse`` accepts."""
    parts = text.split(".", 2)
    if len(parts) != 3 or not _number(parts[0]) or not _number(parts[1]):
        return False
    patch, build, prerelease = parts[2], "", ""
    has_build = "+" in patch
    if has_build:
        patch, build = patch.split("+", 1)
    has_pre = "-" in patch
    if has_pre:
        patch, prerelease = patch.split("-", 1)
    if not _number(patch):
        return False
    if has_pre and not all(_prerelease_ok(p) for p in prerelease.split(".")):
        return False
    return not has_build or all(p and set(p) <= _ALNUM for p in build.split("."))


def _prerelease_ok(part: str) -> bool:
    if not part:
        return False
    if set(part) <= _DIGITS:
        return _number(part)
    return set(part) <= _ALNUM


_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_DURATION_PART = re.compile(r"(\d*)(?:\.(\d*))?([^\d.]+)")
_INT64_MAX = 2**63 - 1


def parse_duration(text: str) -> int:
    """``time.ParseDuration``: "1h2m3.5s" -> nanoseconds; ValueError when Go would refuse."""
    original, sign = text, 1
    if text[:1] in ("+", "-"):
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    if text == "0":
        return 0
    if not text:
        raise ValueError(f"time: invalid duration {original!r}")
    total, pos = 0, 0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if match is None or (not match.group(1) and not match.group(2)):
            raise ValueError(f"time: invalid duration {original!r}")
        whole, frac, unit = match.groups()
        if unit not in _UNITS_NS:
            raise ValueError(f"time: unknown unit {unit!r} in duration {original!r}")
        scale = _UNITS_NS[unit]
        value = int(whole or "0") * scale
        if frac:
            value += int(frac) * scale // 10 ** len(frac)
        total += value
        pos = match.end()
    if total > _INT64_MAX + (1 if sign < 0 else 0):
        raise ValueError(f"time: invalid duration {original!r}")
    return sign * total


def format_duration(ns: int) -> str:
    """``time.Duration.String``: 90s -> "1m30s", 0 -> "0s", 1.5s -> "1.5s"."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1_000_000_000:
        for unit, scale in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= scale:
                return sign + _fraction(ns, scale) + unit
    hours, rest = divmod(ns, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = _fraction(rest, 1_000_000_000) + "s"
    if hours or minutes:
        text = f"{minutes}m" + text
    if hours:
        text = f"{hours}h" + text
    return sign + text


def _fraction(value: int, scale: int) -> str:
    whole, frac = divmod(value, scale)
    if not frac:
        return str(whole)
    digits = str(frac).rjust(len(str(scale)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"
