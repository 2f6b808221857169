"""Helpers shared by every test tier (import as ``tests.support``): waiting without fixed
sleeps (``waiting``, re-exported here with the runtime's ``wait_established``), a hand-set
clock (``clock``), the Resources tests touch (``resources``), object builders
(``builders``), the pool steps every harness takes (``pools``: scale, roll, reports
running), the one condition lookup (``conditions``), waiting for aggregated ClusterRoles
(``rbac``), the leaked-task check behind ``tests/conftest.py`` (``tasks``) and upstream's
core manager (``upstream``), each imported by its module path."""

from tests.support.waiting import (
    GENEROUS,
    Changes,
    eventually,
    wait_for,
    watch_until,
)

from machinepool.runtime import wait_established

__all__ = [
    "GENEROUS",
    "Changes",
    "eventually",
    "wait_established",
    "wait_for",
    "watch_until",
]
