"""The benchmark workload and how convergence is observed.

``pool_objects`` writes the three objects of one pool (KubeadmConfig, SimMachinePool with zero
boot delay, MachinePool), fully specified so no defaulting webhook is needed by either core.
``Observer`` watches MachinePools, SimMachinePools (management) and Nodes (workload) with the
runtime's informers and records, on arrival of each event, when a pool reached a target and
when each Node turned Ready; ``wait`` returns the moment every named pool met its target.
Nothing polls: the benchmark's own clock stops on the watch event that completes the target.
Called by ``bench_machinepool.py`` for the convergence, scale and latency runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from machinepool.api.infra_sim import SIM_MACHINE_POOLS
from machinepool.api.kinds import KUBEADM_CONFIGS, MACHINE_POOLS, MACHINES
from machinepool.runtime import NODES, ApiError, Client, FuncHandler, Informer, PatchType, Resource
from mpbench.env import CLUSTER, DRIVER_AGENT, NAMESPACE

Obj = dict[str, Any]

FROM_VERSION = "v1.33.4"
TO_VERSION = "v1.34.4"


def pool_name(i: int) -> str:
    return f"pool-{i:04d}"


def pool_objects(
    name: str, replicas: int, version: str, max_surge: int | str = 1
) -> list[tuple[Resource, Obj]]:
    """Bootstrap config, Sim infra pool and MachinePool of one benchmark pool (rolling
    replacement with ``max_surge`` and maxUnavailable 0)."""
    meta = {"name": name, "namespace": NAMESPACE}
    kubeadm: Obj = {
        "apiVersion": KUBEADM_CONFIGS.api_version,
        "kind": "KubeadmConfig",
        "metadata": meta,
        "spec": {
            "joinConfiguration": {
                "nodeRegistration": {"name": '{{ ds.meta_data["local_hostname"] }}'}
            }
        },
    }
    sim: Obj = {
        "apiVersion": SIM_MACHINE_POOLS.api_version,
        "kind": "SimMachinePool",
        "metadata": meta,
        "spec": {
            "template": {"instanceType": "sim.small", "image": "sim-ubuntu-2404"},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {
                    "maxSurge": max_surge,
                    "maxUnavailable": 0,
                    "deletePolicy": "Oldest",
                },
            },
            "sim": {"bootDelaySeconds": 0},
        },
    }
    pool: Obj = {
        "apiVersion": MACHINE_POOLS.api_version,
        "kind": "MachinePool",
        "metadata": {**meta, "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
        "spec": {
            "clusterName": CLUSTER,
            "replicas": replicas,
            "template": {
                "spec": {
                    "clusterName": CLUSTER,
                    "version": version,
                    "bootstrap": {
                        "configRef": {
                            "apiGroup": "bootstrap.cluster.x-k8s.io",
                            "kind": "KubeadmConfig",
                            "name": name,
                        }
                    },
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "SimMachinePool",
                        "name": name,
                    },
                }
            },
        },
    }
    return [(KUBEADM_CONFIGS, kubeadm), (SIM_MACHINE_POOLS, sim), (MACHINE_POOLS, pool)]


async def bounded(
    names: Iterable[str], send: Callable[[str], Awaitable[object]], limit: int = 16
) -> dict[str, float]:
    """``send(name)`` for each name with at most ``limit`` in flight (so 3,000 creates do not
    stampede); returns when each name's request completed (its own clock for fairness)."""
    sem = asyncio.Semaphore(limit)
    sent: dict[str, float] = {}

    async def one(name: str) -> None:
        async with sem:
            await send(name)
            sent[name] = time.monotonic()

    await asyncio.gather(*(one(n) for n in names))
    return sent


async def create_pools(
    client: Client, names: list[str], replicas: int, version: str, max_surge: int | str = 1
) -> dict[str, float]:
    async def create(name: str) -> None:
        for res, obj in pool_objects(name, replicas, version, max_surge):
            await client.create(res, obj, NAMESPACE)

    return await bounded(names, create)


async def scale_pools(client: Client, names: list[str], replicas: int) -> dict[str, float]:
    return await bounded(names, lambda n: client.set_scale(MACHINE_POOLS, n, NAMESPACE, replicas))


async def roll_pools(client: Client, names: list[str], version: str) -> dict[str, float]:
    patch = {"spec": {"template": {"spec": {"version": version}}}}
    return await bounded(names, lambda n: client.patch(MACHINE_POOLS, n, patch, NAMESPACE))


# -- observing ---------------------------------------------------------------------------------


def node_ready(node: Obj) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def kubelet_version(node: Obj) -> str:
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", ""))


PRESSURE_CONDITIONS = (
    ("MemoryPressure", "KubeletHasSufficientMemory"),
    ("DiskPressure", "KubeletHasNoDiskPressure"),
    ("PIDPressure", "KubeletHasSufficientPID"),
)
"""Conditions a real kubelet reports beside Ready; upstream's Machine NodeHealthy needs them."""


def missing_pressure_conditions(node: Obj) -> list[Obj]:
    """The pressure conditions ``node`` lacks, as a kubelet would report them (all False)."""
    have = {c.get("type") for c in (node.get("status") or {}).get("conditions") or []}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return [
        {
            "type": kind,
            "status": "False",
            "reason": reason,
            "message": "bench: reported for the node simulator",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        for kind, reason in PRESSURE_CONDITIONS
        if kind not in have
    ]


def observed(pool: Obj) -> bool:
    """The core's status says it has seen the pool's current generation."""
    status = pool.get("status") or {}
    return bool(status.get("observedGeneration") == pool["metadata"].get("generation"))


def pool_running(pool: Obj, replicas: int, *, current: bool = True) -> bool:
    """What the core reports: Running, ``replicas`` desired, existing and ready; with
    ``current``, also observedGeneration at the pool's generation (upstream's core can leave
    it one behind after its own providerIDList write, with nothing to wake it)."""
    spec, status = pool.get("spec") or {}, pool.get("status") or {}
    return (
        spec.get("replicas") == replicas
        and (observed(pool) or not current)
        and status.get("phase") == "Running"
        and status.get("replicas") == replicas
        and status.get("readyReplicas") == replicas
        and len(status.get("nodeRefs") or []) == replicas
    )


def node_names(pool: Obj) -> list[str]:
    return [ref.get("name", "") for ref in (pool.get("status") or {}).get("nodeRefs") or []]


@dataclass
class Target:
    """What every named pool must reach: replicas, and the kubelet version of all its Nodes."""

    names: frozenset[str]
    replicas: int
    version: str
    current: bool = True
    """Whether observedGeneration must be current too (see ``pool_running``)."""
    done: asyncio.Event = field(default_factory=asyncio.Event)
    met: set[str] = field(default_factory=set)
    met_at: dict[str, float] = field(default_factory=dict)
    """Pool -> arrival time of the event with which it last came to meet the target."""
    done_at: float = 0.0


class Observer:
    """Watches pools, infra pools and Nodes; records arrival times; resolves ``Target``s."""

    def __init__(self, client: Client, workload: Client, *, fill_conditions: bool) -> None:
        self.workload = workload
        self.fill_conditions = fill_conditions
        """Add the pressure conditions the node simulator does not report (see report)."""
        self._filling: dict[str, asyncio.Task[None]] = {}
        self.pools = Informer(client, MACHINE_POOLS, NAMESPACE)
        self.sim_pools = Informer(client, SIM_MACHINE_POOLS, NAMESPACE)
        self.nodes = Informer(workload, NODES)
        self.node_pool: dict[str, str] = {}
        """Node name -> pool whose nodeRefs name it (so a Node event re-checks one pool)."""
        self.node_ready_at: dict[str, float] = {}
        """Node name -> when it was first seen Ready."""
        self.running_at: dict[str, float] = {}
        """Pool -> when it was last seen turning Running at its spec.replicas (see pool_running)."""
        self.sim_updated_at: dict[str, float] = {}
        """Infra pool -> arrival time of its latest change."""
        self.on_sim_update: Callable[[str, float], None] | None = None
        self._target: Target | None = None
        self._ready: set[str] = set()
        """Names of the Nodes Ready now (kept on every Node event)."""
        self.min_ready_nodes: int | None = None
        """Fewest Ready Nodes seen since ``track_minimums`` (None: not tracking)."""
        self.min_pool_ready: dict[str, int] = {}
        """Pool -> fewest ``status.readyReplicas`` seen since ``track_minimums``."""
        self._tracking = False
        self._pool_waiters: list[tuple[Callable[[Obj], bool], str, asyncio.Event]] = []
        self.pools.add_handler(FuncHandler(add=self._pool, update=self._pool_update))
        self.nodes.add_handler(
            FuncHandler(add=self._node, update=self._node_update, delete=self._node_delete)
        )
        self.sim_pools.add_handler(FuncHandler(update=self._sim_update))

    async def start(self) -> None:
        for informer in (self.pools, self.sim_pools, self.nodes):
            await informer.start()
        for informer in (self.pools, self.sim_pools, self.nodes):
            await informer.wait_synced()

    async def stop(self) -> None:
        for task in list(self._filling.values()):
            task.cancel()
        for informer in (self.pools, self.sim_pools, self.nodes):
            await informer.stop()

    # -- handlers (run on each watch event, so time.monotonic() is the arrival time) --------

    def _pool_update(self, old: Obj, new: Obj) -> None:
        self._pool(new, old)

    def _pool(self, pool: Obj, old: Obj | None = None) -> None:
        now = time.monotonic()
        name = pool["metadata"]["name"]
        replicas = (pool.get("spec") or {}).get("replicas", -1)
        if pool_running(pool, replicas) and (old is None or not pool_running(old, replicas)):
            self.running_at[name] = now
        for node in node_names(pool):
            self.node_pool[node] = name
        if self._tracking:
            ready = int((pool.get("status") or {}).get("readyReplicas") or 0)
            self.min_pool_ready[name] = min(self.min_pool_ready.get(name, ready), ready)
        for predicate, wanted, event in self._pool_waiters:
            if wanted == name and predicate(pool):
                event.set()
        self._check(name, now)

    def _node_update(self, old: Obj, new: Obj) -> None:
        self._node(new)

    def _node(self, node: Obj) -> None:
        now = time.monotonic()
        name = node["metadata"]["name"]
        if node_ready(node) and name not in self.node_ready_at:
            self.node_ready_at[name] = now
        if node_ready(node):
            self._ready.add(name)
        else:
            self._ready.discard(name)
            self._note_ready_count()
        if self.fill_conditions and name not in self._filling and missing_pressure_conditions(node):
            self._filling[name] = asyncio.create_task(self._fill(node))
        pool = self.node_pool.get(name)
        if pool is not None:
            self._check(pool, now)

    def _node_delete(self, node: Obj) -> None:
        self._ready.discard(node["metadata"]["name"])
        self._note_ready_count()

    def _note_ready_count(self) -> None:
        if self._tracking and self.min_ready_nodes is not None:
            self.min_ready_nodes = min(self.min_ready_nodes, len(self._ready))

    @property
    def ready_nodes(self) -> int:
        return len(self._ready)

    def track_minimums(self) -> None:
        """From now on, record the fewest Ready Nodes and each pool's fewest readyReplicas."""
        self._tracking = True
        self.min_ready_nodes = len(self._ready)
        self.min_pool_ready = {}
        for pool in self.pools.list():
            ready = int((pool.get("status") or {}).get("readyReplicas") or 0)
            self.min_pool_ready[pool["metadata"]["name"]] = ready

    def stop_tracking(self) -> None:
        self._tracking = False

    async def wait_pool(self, name: str, predicate: Callable[[Obj], bool], timeout: float) -> None:
        """Until MachinePool ``name`` satisfies ``predicate`` (checked on each of its events)."""
        event = asyncio.Event()
        entry = (predicate, name, event)
        self._pool_waiters.append(entry)
        try:
            pool = self.pools.get(name, NAMESPACE)
            if pool is not None and predicate(pool):
                return
            await asyncio.wait_for(event.wait(), timeout)
        finally:
            self._pool_waiters.remove(entry)

    async def _fill(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        patch = {"status": {"conditions": missing_pressure_conditions(node)}}
        try:
            await self.workload.patch(
                NODES, name, patch, subresource="status", patch_type=PatchType.STRATEGIC
            )
        except ApiError:
            pass  # gone or changed: the next event for it retries
        finally:
            self._filling.pop(name, None)

    def _sim_update(self, old: Obj, new: Obj) -> None:
        now = time.monotonic()
        name = new["metadata"]["name"]
        self.sim_updated_at[name] = now
        if self.on_sim_update is not None:
            self.on_sim_update(name, now)

    # -- targets -----------------------------------------------------------------------

    def pool_meets(self, name: str, replicas: int, version: str, current: bool = True) -> bool:
        pool = self.pools.get(name, NAMESPACE)
        if pool is None or not pool_running(pool, replicas, current=current):
            return False
        for node_name in node_names(pool):
            node = self.nodes.get(node_name)
            if node is None or not node_ready(node) or kubelet_version(node) != version:
                return False
        return True

    def _check(self, name: str, now: float) -> None:
        target = self._target
        if target is None or name not in target.names:
            return
        if self.pool_meets(name, target.replicas, target.version, target.current):
            if name not in target.met:
                target.met_at[name] = now
            target.met.add(name)
        else:
            target.met.discard(name)
        if len(target.met) == len(target.names) and not target.done.is_set():
            target.done_at = now
            target.done.set()

    def expect(
        self, names: Iterable[str], replicas: int, version: str, current: bool = True
    ) -> Target:
        """Start tracking a target; pools already meeting it count at once."""
        target = Target(frozenset(names), replicas, version, current)
        self._target = target
        now = time.monotonic()
        for name in target.names:
            self._check(name, now)
        return target

    async def wait(self, target: Target, timeout: float, progress: float = 15.0) -> float:
        """The arrival time of the event that completed ``target``; TimeoutError with a
        summary of what is missing after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not target.done.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(self.summary(target))
            try:
                await asyncio.wait_for(target.done.wait(), min(progress, left))
            except TimeoutError:
                print(f"    ... {self.summary(target)}", flush=True)
        return target.done_at

    def summary(self, target: Target) -> str:
        missing = sorted(target.names - target.met)
        ready = sum(1 for n in self.nodes.list() if node_ready(n))
        text = (
            f"{len(target.met)}/{len(target.names)} pools at {target.replicas} x "
            f"{target.version}; {ready}/{len(self.nodes)} Nodes Ready"
        )
        if missing:
            pool = self.pools.get(missing[0], NAMESPACE)
            status = (pool or {}).get("status") or {}
            text += (
                f"; e.g. {missing[0]}: phase={status.get('phase')} "
                f"replicas={status.get('replicas')} ready={status.get('readyReplicas')} "
                f"nodeRefs={len(status.get('nodeRefs') or [])}"
            )
        return text


__all__ = [
    "DRIVER_AGENT",
    "FROM_VERSION",
    "MACHINES",
    "MACHINE_POOLS",
    "SIM_MACHINE_POOLS",
    "TO_VERSION",
    "Observer",
    "create_pools",
    "observed",
    "pool_name",
    "pool_running",
    "roll_pools",
    "scale_pools",
]
