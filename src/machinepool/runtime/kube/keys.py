"""Object keys: what a work queue holds and a reconcile receives.

A reconcile gets a key, never an object, so it always reads current state (level-triggered).
The informer store, the work queue, event mappers and reconcilers all speak ``ObjectKey``.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class ObjectKey(NamedTuple):
    """``namespace``/``name`` of an object; ``namespace`` is ``""`` for cluster-scoped kinds.

    >>> str(ObjectKey("default", "pool-a"))
    'default/pool-a'
    >>> ObjectKey.parse("node-1")
    ObjectKey(namespace='', name='node-1')
    """

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @classmethod
    def of(cls, obj: dict[str, Any]) -> ObjectKey:
        """The key of a raw object (its ``metadata.namespace`` and ``metadata.name``)."""
        meta = obj.get("metadata") or {}
        return cls(str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    @classmethod
    def parse(cls, text: str) -> ObjectKey:
        """Parse ``"ns/name"`` or ``"name"``."""
        namespace, _, name = text.rpartition("/")
        return cls(namespace, name)
