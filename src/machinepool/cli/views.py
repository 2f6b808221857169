"""Rendering pools for people: the pool table, the describe tree, short condition summaries.

Pure functions from raw objects to rich renderables, so they are easy to test and reuse in
``get``, ``describe``, ``demo`` and ``rollout status``.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from machinepool.api.meta import dig
from machinepool.api.views import MachinePoolView, MachineView, NodeView

Obj = dict[str, Any]


def versions_text(pool: Obj) -> str:
    """``v1.34.4=3 v1.33.4=1``: instances by Kubernetes version, newest first."""
    versions = MachinePoolView(pool).status.versions or []
    parts = sorted(
        ((str(v.get("version", "?")), int(v.get("replicas", 0))) for v in versions), reverse=True
    )
    return " ".join(f"{v}={n}" for v, n in parts) or "-"


def problems(obj: Obj) -> list[tuple[str, str, str]]:
    """(type, reason, message) of every condition that is not as it should be.

    A condition is a problem when it is False, except the ones whose True means trouble
    (Paused, Deleting, ScalingUp/Down, Remediating, RollingOut), which count when True.
    """
    inverted = {"Paused", "Deleting", "ScalingUp", "ScalingDown", "Remediating", "RollingOut"}
    found = []
    for cond in dig(obj, "status", "conditions", default=[]) or []:
        bad = cond.get("status") == ("True" if cond.get("type") in inverted else "False")
        if bad or cond.get("status") == "Unknown":
            found.append(
                (str(cond.get("type")), str(cond.get("reason", "")), str(cond.get("message", "")))
            )
    return found


def _problem_text(obj: Obj) -> Text:
    items = problems(obj)
    if not items:
        return Text("ok", style="green")
    return Text(", ".join(f"{t}: {r}" for t, r, _ in items), style="yellow")


def _count(pool: Obj, field: str) -> str:
    return _or_dash(dig(pool, "status", field))


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def pool_table(pools: list[Obj], *, namespaces: bool = False) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    if namespaces:
        table.add_column("NAMESPACE")
    for col in ("NAME", "CLUSTER", "PHASE", "DESIRED", "CURRENT", "READY", "AVAILABLE"):
        table.add_column(col)
    for col in ("UP-TO-DATE", "VERSIONS", "CONDITIONS"):
        table.add_column(col)
    for pool in pools:
        view = MachinePoolView(pool)
        row = [
            pool["metadata"]["name"],
            str(view.spec.cluster_name or ""),
            str(view.status.phase or "-"),
            _or_dash(view.spec.replicas),
            _count(pool, "replicas"),
            _count(pool, "readyReplicas"),
            _count(pool, "availableReplicas"),
            _count(pool, "upToDateReplicas"),
            versions_text(pool),
        ]
        if namespaces:
            row.insert(0, pool["metadata"]["namespace"])
        table.add_row(*row, _problem_text(pool))
    return table


def _conditions_branch(tree: Tree, obj: Obj) -> None:
    for type_, reason, message in problems(obj):
        tree.add(Text(f"{type_}: {reason} {message}".rstrip(), style="yellow"))


def _node_label(node: Obj | None, provider_id: str) -> Text:
    if node is None:
        return Text(f"Node for {provider_id}: not registered", style="yellow")
    view = NodeView(node)
    conditions: list[Obj] = view.status.conditions or []
    ready: Obj = next((c for c in conditions if c.get("type") == "Ready"), {})
    ok = ready.get("status") == "True"
    version = view.status.node_info.kubelet_version
    if version is None:
        version = "?"
    style = "green" if ok else "red"
    return Text(
        f"Node/{node['metadata']['name']}  Ready={ready.get('status', 'Unknown')}  {version}",
        style=style,
    )


def describe_tree(
    pool: Obj,
    *,
    bootstrap: Obj | None,
    infra: Obj | None,
    machines: list[Obj],
    nodes_by_provider_id: dict[str, Obj],
) -> Tree:
    """MachinePool -> bootstrap config, infra pool -> Machines -> Nodes, problems in colour."""
    meta = pool["metadata"]
    status = pool.get("status") or {}
    spec = MachinePoolView(pool).spec
    head = Text(
        f"MachinePool/{meta['name']}  {status.get('phase', '-')}  "
        f"ready {status.get('readyReplicas', 0)}/{_or_dash(spec.replicas)}  "
        f"up-to-date {status.get('upToDateReplicas', 0)}  {versions_text(pool)}",
        style="bold",
    )
    tree = Tree(head)
    _conditions_branch(tree, pool)
    ref = spec.template.spec.bootstrap.config_ref.raw or {}
    if ref:
        label = f"{ref.get('kind')}/{ref.get('name')}"
        created = dig(bootstrap or {}, "status", "initialization", "dataSecretCreated")
        style = "green" if created else "yellow"
        node = tree.add(Text(f"{label}  dataSecretCreated={bool(created)}", style=style))
        if bootstrap is None:
            node.add(Text("not found", style="red"))
        else:
            _conditions_branch(node, bootstrap)
    infra_ref = spec.template.spec.infrastructure_ref.raw or {}
    infra_branch = tree.add(
        Text(
            f"{infra_ref.get('kind')}/{infra_ref.get('name')}  "
            f"ready={dig(infra or {}, 'status', 'ready', default=False)}  "
            f"replicas={dig(infra or {}, 'status', 'replicas', default=0)}",
            style="green" if dig(infra or {}, "status", "ready") else "yellow",
        )
    )
    if infra is None:
        infra_branch.add(Text("not found", style="red"))
    else:
        _conditions_branch(infra_branch, infra)
    _machines_branch(tree, pool, machines, nodes_by_provider_id)
    return tree


def machine_health(machine: Obj) -> Text:
    """``health=...`` of a pool Machine, from the conditions a MachineHealthCheck writes.

    ``-`` when no health check selects it; ``Healthy``; ``Unhealthy (reason)`` and, once its
    owner acts on it, what remediation is doing (waiting, deferred, deleting).
    """
    conditions = MachineView(machine).status.conditions or []
    by_type = {str(c.get("type")): c for c in conditions if isinstance(c, dict)}
    check = by_type.get("HealthCheckSucceeded")
    if check is None:
        return Text("health=-", style="dim")
    if check.get("status") == "True":
        return Text("health=Healthy", style="green")
    text = f"health=Unhealthy ({check.get('reason', '')})"
    owner = by_type.get("OwnerRemediated")
    if owner is not None and owner.get("status") == "False":
        text += f" remediation={owner.get('reason', '')}"
    return Text(text, style="red")


def _machines_branch(
    tree: Tree, pool: Obj, machines: list[Obj], nodes_by_provider_id: dict[str, Obj]
) -> None:
    if machines:
        branch = tree.add(Text(f"Machines ({len(machines)})", style="bold"))
        for machine in sorted(machines, key=lambda m: m["metadata"]["name"]):
            view = MachineView(machine)
            pid = view.spec.provider_id or ""
            label = Text(
                f"Machine/{machine['metadata']['name']}  "
                f"{_or_dash(view.status.phase)}  "
                f"{view.spec.version or ''}  "
            )
            label.append_text(machine_health(machine))
            sub = branch.add(label)
            _conditions_branch(sub, machine)
            if pid:
                sub.add(_node_label(nodes_by_provider_id.get(pid), pid))
        return
    ids = MachinePoolView(pool).spec.provider_id_list or []
    branch = tree.add(Text(f"Instances ({len(ids)})", style="bold"))
    for pid in ids:
        branch.add(_node_label(nodes_by_provider_id.get(pid), pid))
