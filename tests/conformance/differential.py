"""The differential harness: one input, two core managers, the objects compared field by field.

One management cluster (``tests.support.upstream``) holds upstream's core CRDs and webhooks,
so both sides are admitted alike. Upstream's core manager (its MachinePool gate on) runs with
``--watch-filter=upstream``, ours with ``--watch-filter=ours``; our bootstrap and Sim providers
and the node simulator, unfiltered, serve both. Each side has its own workload cluster.

Upstream's MachinePool controller filters only the watches it declares at start: those it adds
later, on the kinds a MachinePool refers to (its bootstrap config, its infra pool), enqueue
whatever MachinePool owns the changed object, our side's too. So that its writes cannot land
on our side's objects (and hide our differences), upstream's manager runs as a user that may
read everything but write only in the upstream side's namespaces (``upstream_access``,
``let_upstream_write``); its attempts on ours fail with 403 in its log.

A scenario is a list of steps, each applied to both sides at once: an action, then a check
that says the step has had its effect. Then the sides' MachinePool, Machines and Nodes are
normalised (``normalise``: names that carry the namespace, UIDs, times, resourceVersions, the
watch-filter value) and compared until they agree up to the differences listed, with reasons,
in docs/upstream-differences.md (``Allowed``). A difference not listed there fails the suite.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tests.support import eventually
from tests.support.conditions import is_true
from tests.support.pools import reports_running
from tests.support.resources import MACHINE_POOLS, MACHINES, SIM_MACHINE_POOLS

from machinepool.controlplane import ControlPlane, WorkloadCluster
from machinepool.runtime import NAMESPACES, NODES, Client, NotFound, Obj, Resource, pki

WATCH_FILTER = "cluster.x-k8s.io/watch-filter"
DIFFERENCES = Path(__file__).resolve().parents[2] / "docs" / "upstream-differences.md"

_DROPPED_META = {"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"}
_TIME_KEYS = {
    "lastTransitionTime",
    "lastHeartbeatTime",
    "lastUpdated",
    "deletionTimestamp",
    "nodeDrainStartTime",
    "waitForNodeVolumeDetachStartTime",
}
_RANDOM_KEYS = {"bootID", "systemUUID"}
"""Made up afresh by the node simulator for every Node, whichever core runs."""


@dataclass
class Side:
    """One core manager's half of a scenario: its namespace and its workload cluster."""

    name: str
    """``upstream`` or ``ours``: also the watch-filter value of its objects."""
    client: Client
    workload: Client
    namespace: str
    cluster: WorkloadCluster | None = None
    """The workload cluster behind ``workload``, for a scenario that makes its own Cluster."""
    node_names: dict[str, str] = field(default_factory=dict)
    """Each Node name and address seen, and what it is said as (``replacements``)."""
    infra_uids: dict[str, str] = field(default_factory=dict)
    """The infra pool UID of each pool, as last read: instance names keep carrying it after
    the infra pool is gone."""
    infra_names: dict[str, str] = field(default_factory=dict)
    """The infra pool name of each pool, as last read (``infra_of``)."""
    bootstrap_names: dict[str, str] = field(default_factory=dict)
    """The bootstrap config name of each pool, as last read (``bootstrap_of``)."""

    @property
    def labels(self) -> dict[str, str]:
        """The label of every object this side's manager is to serve (its watch filter): a
        pool's objects are ``builders.pool_objects(..., labels=side.labels)``."""
        return {WATCH_FILTER: self.name}

    async def pool_objects(self, pool: str) -> dict[str, Any]:
        """The MachinePool, its Machines and its Nodes, as read now."""
        try:
            mp: Obj | None = await self.client.get(MACHINE_POOLS, pool, self.namespace)
        except NotFound:
            mp = None
        machines = [
            m
            for m in (await self.client.list(MACHINES, self.namespace)).items
            if (m["metadata"].get("labels") or {}).get("cluster.x-k8s.io/pool-name") == pool
        ]
        nodes = await self.pool_nodes(pool)
        return {
            "MachinePool": mp,
            "Machines": sorted(machines, key=lambda m: m["metadata"]["name"]),
            "Nodes": sorted(nodes, key=_instance_of),
        }

    async def pool_nodes(self, pool: str) -> list[Obj]:
        """The pool's Nodes, known by providerID (``<scheme>:///[<zone>/]<instance>``): a
        Node is named after its instance's hostname, which says nothing of the pool, and its
        instance after the infra pool."""
        infra = await self.infra_of(pool)
        return [
            n
            for n in (await self.workload.list(NODES)).items
            if _instance_of(n).startswith(f"{infra}-")
        ]

    async def infra_of(self, pool: str) -> str:
        """The name of the pool's infra pool: the pool's own, unless its MachinePool names
        another (one made by upstream's topology controller has a suffix of its own)."""
        with contextlib.suppress(NotFound):
            mp = await self.client.get(MACHINE_POOLS, pool, self.namespace)
            ref = mp["spec"]["template"]["spec"]["infrastructureRef"]["name"]
            self.infra_names[pool] = str(ref)
        return self.infra_names.get(pool, pool)

    async def bootstrap_of(self, pool: str) -> str:
        """The name of the pool's bootstrap config, as ``infra_of``."""
        with contextlib.suppress(NotFound, KeyError):
            mp = await self.client.get(MACHINE_POOLS, pool, self.namespace)
            ref = mp["spec"]["template"]["spec"]["bootstrap"]["configRef"]["name"]
            self.bootstrap_names[pool] = str(ref)
        return self.bootstrap_names.get(pool, pool)

    async def replacements(self, pool: str) -> dict[str, str]:
        """Strings that differ between the sides only by construction, and what they become."""
        out = {self.namespace: "NAMESPACE", WATCH_FILTER + "=" + self.name: "WATCH-FILTER"}
        # A Node's name and address come from the address the cloud gave its instance, which
        # differs between the sides: both are said as the instance's (itself normalised below).
        # Nodes seen earlier count too: a nodeRef or a message can outlive its Node.
        for node in await self.pool_nodes(pool):
            instance = _instance_of(node)
            self.node_names[node["metadata"]["name"]] = f"NODE-OF-{instance}"
            for address in (node.get("status") or {}).get("addresses") or []:
                if address.get("type") == "InternalIP":
                    self.node_names[str(address["address"])] = f"IP-OF-{instance}"
        out.update(self.node_names)
        # Once the infra pool is deleted (infra-deleted), the UID remembered earlier serves.
        infra_name = await self.infra_of(pool)
        with contextlib.suppress(NotFound):
            infra = await self.client.get(SIM_MACHINE_POOLS, infra_name, self.namespace)
            self.infra_uids[pool] = infra["metadata"]["uid"]
        if pool in self.infra_uids:
            out[f"{infra_name}-{self.infra_uids[pool][:5]}-"] = f"{pool}-UID-"
        # Names upstream's topology controller made with a random suffix of their own.
        if infra_name != pool:
            out[infra_name] = f"{pool}-INFRA"
        bootstrap = await self.bootstrap_of(pool)
        if bootstrap != pool:
            out[bootstrap] = f"{pool}-BOOTSTRAP"
        return out


def _instance_of(node: Obj) -> str:
    return str((node.get("spec") or {}).get("providerID") or "").rpartition("/")[2]


# -- upstream's access -----------------------------------------------------------------------

UPSTREAM_USER = "conformance-upstream"
_RBAC = "rbac.authorization.k8s.io"
_CLUSTER_ROLES = Resource(_RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False)
_CLUSTER_ROLE_BINDINGS = Resource(
    _RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)
_ROLE_BINDINGS = Resource(_RBAC, "v1", "rolebindings", "RoleBinding")
_READ = f"{UPSTREAM_USER}-read"
_WRITE = f"{UPSTREAM_USER}-write"


async def upstream_access(cp: ControlPlane, client: Client, directory: Path) -> Path:
    """A kubeconfig for upstream's manager as ``UPSTREAM_USER``: read access to everything,
    write access to CRDs and events everywhere, to the rest only where ``let_upstream_write``
    grants it."""
    read_rules = [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]},
        {"nonResourceURLs": ["*"], "verbs": ["get"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["*"], "verbs": ["*"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["*"]},
    ]
    roles = {_READ: read_rules, _WRITE: [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}
    for name, rules in roles.items():
        await client.create(_CLUSTER_ROLES, {"metadata": {"name": name}, "rules": rules})
    binding = {
        "metadata": {"name": _READ},
        "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": _READ},
        "subjects": [{"apiGroup": _RBAC, "kind": "User", "name": UPSTREAM_USER}],
    }
    await client.create(_CLUSTER_ROLE_BINDINGS, binding)
    management = cp.management
    user = pki.issue(management.pki.ca, UPSTREAM_USER)
    path = directory / "upstream.kubeconfig"
    path.write_text(yaml.safe_dump(management.pki.kubeconfig(management.url, UPSTREAM_USER, user)))
    path.chmod(0o600)
    return path


async def let_upstream_write(client: Client, namespace: str) -> None:
    """Namespace ``namespace``, in which upstream's manager may write."""
    await client.create(NAMESPACES, {"metadata": {"name": namespace}})
    binding = {
        "metadata": {"name": _WRITE, "namespace": namespace},
        "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": _WRITE},
        "subjects": [{"apiGroup": _RBAC, "kind": "User", "name": UPSTREAM_USER}],
    }
    await client.create(_ROLE_BINDINGS, binding, namespace)


# -- normalising and comparing ---------------------------------------------------------------


def normalise(obj: Any, replacements: Mapping[str, str], generation: int | None = None) -> Any:
    """``obj`` without what differs by construction: UIDs, resourceVersions, times, managed
    fields; namespaces, uid-derived instance names and the watch-filter value replaced; an
    ``observedGeneration`` said as ``current`` or ``behind`` its object's generation (how many
    spec writes led there is timing, not behaviour)."""
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("generation"), int):
            generation = meta["generation"]
        out = {}
        for key, value in obj.items():
            if key in _DROPPED_META or key in _TIME_KEYS or key in _RANDOM_KEYS:
                continue
            if key == "observedGeneration" and generation is not None:
                out[key] = "current" if value == generation else "behind"
                continue
            out[normalise(key, replacements)] = normalise(value, replacements, generation)
        return out
    if isinstance(obj, list):
        return [normalise(v, replacements, generation) for v in obj]
    if isinstance(obj, str):
        if obj in ("upstream", "ours"):
            return "WATCH-FILTER-VALUE"
        for old, new in replacements.items():
            obj = obj.replace(old, new)
        return obj
    return obj


def _conditions_by_type(items: list[Any]) -> dict[str, Any]:
    return {str(c.get("type")): c for c in items if isinstance(c, dict)}


def differences(upstream: Any, ours: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """``(path, upstream's value, ours)`` for every leaf that differs. Lists of conditions
    compare by type (``conditions[Ready]``), other lists by position."""
    if isinstance(upstream, dict) and isinstance(ours, dict):
        for key in sorted(set(upstream) | set(ours)):
            yield from differences(upstream.get(key), ours.get(key), f"{path}.{key}")
    elif (
        isinstance(upstream, list)
        and isinstance(ours, list)
        and path.endswith("conditions")
        and all(isinstance(c, dict) and "type" in c for c in [*upstream, *ours])
    ):
        up, our = _conditions_by_type(upstream), _conditions_by_type(ours)
        for kind in sorted(set(up) | set(our)):
            yield from differences(up.get(kind), our.get(kind), f"{path}[{kind}]")
    elif isinstance(upstream, list) and isinstance(ours, list) and len(upstream) == len(ours):
        for i, (a, b) in enumerate(zip(upstream, ours, strict=True)):
            yield from differences(a, b, f"{path}[{i}]")
    elif upstream != ours:
        yield path, upstream, ours


SOMETIMES = "Sometimes:"
"""A reason that starts so marks a difference that depends on timing: it need not show in
every run (``test_every_listed_difference_still_occurs`` passes over it)."""


@dataclass(frozen=True)
class Allowed:
    """One row of docs/upstream-differences.md: a path pattern and why it differs."""

    pattern: str
    """``Kind.path`` with ``*`` for any run of characters (``MachinePool.status.conditions[*]``),
    optionally after ``<scenario>: `` to allow it in that scenario only."""
    reason: str

    @property
    def sometimes(self) -> bool:
        return self.reason.startswith(SOMETIMES)

    def matches(self, path: str, scenario: str = "") -> bool:
        only, pattern = _SCOPED.fullmatch(self.pattern).groups()  # type: ignore[union-attr]
        if only is not None and only != scenario:
            return False
        regex = ".*".join(re.escape(part) for part in pattern.split("*"))
        return re.fullmatch(regex, path) is not None


_SCOPED = re.compile(r"(?:([a-z0-9-]+): )?(.+)")
"""``<scenario>: <pattern>`` or a bare pattern (paths start with a kind, never so)."""


def allowed_differences(text: str | None = None) -> list[Allowed]:
    """The rows of the table in docs/upstream-differences.md: `` `pattern` | reason ``."""
    text = DIFFERENCES.read_text() if text is None else text
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`") and cells[0].endswith("`"):
            rows.append(Allowed(cells[0].strip("`"), cells[1]))
    return rows


def compare(
    upstream: Mapping[str, Any],
    ours: Mapping[str, Any],
    allowed: list[Allowed],
    scenario: str = "",
) -> tuple[list[str], set[str]]:
    """The unlisted differences (as readable lines) and the listed patterns that matched."""
    unlisted, used = [], set()
    for kind in upstream:
        up, our = upstream[kind], ours[kind]
        if isinstance(up, list) and isinstance(our, list) and len(up) != len(our):
            unlisted.append(f"{kind}: upstream has {len(up)}, ours {len(our)}")
            continue
        for path, a, b in differences(up, our, kind):
            rule = next((r for r in allowed if r.matches(path, scenario)), None)
            if rule is None:
                unlisted.append(f"{path}: upstream {a!r}, ours {b!r}")
            else:
                used.add(rule.pattern)
    return unlisted, used


# -- scenarios -------------------------------------------------------------------------------

Action = Callable[[Side, str], Awaitable[None]]
"""Given a side and the scenario's pool name."""
Check = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class Step:
    """Do ``action`` on a side, wait until ``done`` holds for its pool objects, compare."""

    what: str
    action: Action
    done: Check


@dataclass(frozen=True)
class Scenario:
    """Steps run on both sides; the pool (and its objects) are named after the scenario."""

    name: str
    steps: list[Step]
    cluster: bool = True
    """Whether the harness makes the Cluster (a plain one, provisioned); False: the first
    step does (a Cluster with a topology, say)."""


def status(objs: dict[str, Any]) -> dict[str, Any]:
    mp = objs["MachinePool"] or {}
    return dict(mp.get("status") or {})


def running(replicas: int) -> Check:
    """The pool reports ``replicas`` running (``reports_running``), with as many replicas,
    Machines and Nodes, every Node Ready."""

    def check(objs: dict[str, Any]) -> bool:
        nodes = objs["Nodes"]
        return (
            reports_running(objs["MachinePool"], replicas, node_refs=False)
            and status(objs).get("replicas", 0) == replicas
            and len(objs["Machines"]) == replicas
            and len(nodes) == replicas
            and all(is_true(n, "Ready") for n in nodes)
        )

    return check


async def until(side: Side, pool: str, check: Check, what: str, within: float) -> None:
    async def holds() -> bool:
        return check(await side.pool_objects(pool))

    try:
        await eventually(holds, within=within, interval=0.5)
    except TimeoutError:
        objs = await side.pool_objects(pool)
        raise AssertionError(
            f"{side.name}: timed out after {within:.0f}s waiting for: {what}; "
            f"MachinePool status {status(objs)}, {len(objs['Machines'])} Machines, "
            f"{len(objs['Nodes'])} Nodes"
        ) from None
