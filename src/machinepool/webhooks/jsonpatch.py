"""A minimal RFC 6902 JSON Patch between two JSON documents.

The mutating webhook answers with the operations that turn the object it was sent into the
defaulted one. Only objects are descended into; anything else that differs is replaced whole,
which keeps patches short for the few fields defaulting touches.
"""

from __future__ import annotations

from typing import Any

__all__ = ["diff"]


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def diff(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """Operations (add, remove, replace) that turn ``before`` into ``after``."""
    if isinstance(before, dict) and isinstance(after, dict):
        ops: list[dict[str, Any]] = []
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
        for key, value in after.items():
            child = f"{path}/{_escape(key)}"
            if key not in before:
                ops.append({"op": "add", "path": child, "value": value})
            else:
                ops.extend(diff(before[key], value, child))
        return ops
    if before == after and type(before) is type(after):
        return []
    return [{"op": "replace", "path": path, "value": after}]
