"""Aggregated ClusterRoles, as a test that installs our RBAC waits for them.

The management control plane runs kube-controller-manager's ClusterRole aggregation
controller, as a user's cluster does: it, not the test, copies labelled roles' rules into each
aggregated role, a moment after the apply.
"""

from __future__ import annotations

from tests.support.resources import CLUSTER_ROLES
from tests.support.waiting import eventually

from machinepool.runtime import Client, Obj


def _selected(role: Obj, selectors: list[dict[str, str]]) -> bool:
    labels = role["metadata"].get("labels") or {}
    return any(sel.items() <= labels.items() for sel in selectors)


async def wait_aggregated(client: Client, names: list[str]) -> None:
    """Until each named aggregated ClusterRole holds every rule of the roles it selects."""

    async def folded_in() -> bool:
        roles = {r["metadata"]["name"]: r for r in (await client.list(CLUSTER_ROLES)).items}
        for name in names:
            role = roles[name]
            selectors = [s["matchLabels"] for s in role["aggregationRule"]["clusterRoleSelectors"]]
            have = role.get("rules") or []
            want = [
                r for o in roles.values() if _selected(o, selectors) for r in o.get("rules") or []
            ]
            if any(rule not in have for rule in want):
                return False
        return True

    await eventually(folded_in, f"the aggregation controller to fill {', '.join(names)}")
