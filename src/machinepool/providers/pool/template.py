"""The template hash: what makes an instance outdated.

An instance is replaced when the pool's Kubernetes version, image or instance shape changes;
never for a new bootstrap token, which only affects instances created from now on (the data
Secret is re-read for each new instance). Called by the engine; pure, unit-tested.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

__all__ = ["template_hash"]


def template_hash(version: str, image: str = "", shape: Mapping[str, str] | None = None) -> str:
    """A short stable hash over the fields that require new instances.

    ``shape`` holds provider-specific instance settings (instance type...); bootstrap data
    must not be passed here.

    >>> template_hash("v1.31.0", "img", {"instanceType": "small"}) == template_hash(
    ...     "v1.31.0", "img", {"instanceType": "small"})
    True
    """
    payload = json.dumps(
        {"version": version, "image": image, "shape": dict(sorted((shape or {}).items()))},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
