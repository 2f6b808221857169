"""Go parsers whose exact acceptance rules admission and conversion must share with upstream.

- ``parse_int32``: ``strconv.ParseInt(s, 10, 32)``, used for the autoscaler size annotations;
  its error text is part of upstream's rejection message.
- ``is_semver``: ``blang/semver.Parse``, which upstream uses for ``spec.template.spec.version``.

The Go duration parser lives in ``machinepool.api.meta`` (``parse_duration``), beside the other
wire forms of metav1 types, because the AWS provider reads durations too.

Pure functions; the admission and conversion modules call them.
"""

from __future__ import annotations

__all__ = ["is_semver", "parse_int32"]

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
