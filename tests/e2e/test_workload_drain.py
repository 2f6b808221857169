"""End to end: a user's Deployment on a pool's Nodes stays available while the pool shrinks.

The workload cluster runs as a user's does (``PodLifecycle``): the Deployment and ReplicaSet
controllers create the Pods, the real kube-scheduler binds them, the disruption controller keeps
the PodDisruptionBudget's status and the node lifecycle controller taints a cordoned Node. When
the pool scales down, deleting the victim's Machine cordons its Node and evicts its Pods through
the Eviction API, one at a time as the budget allows; the ReplicaSet replaces each and the
scheduler places the replacement on a Node that stays. Only then does the Node go.

Checked as a user would, from watches rather than samples: the Deployment never had fewer
healthy Pods than its budget allows, the victim's Pods were evicted (not deleted behind the
budget's back, nor collected after their Node vanished), and every Pod ends on a surviving Node.

A second scenario holds the drain with what a kubelet and a user's controllers hold it with: a
Pod whose containers take seconds to stop within their ``terminationGracePeriodSeconds``
(``STOP_SECONDS_ANNOTATION`` tells the node simulator how long), one that ignores SIGTERM and
is killed when its grace period ends, and one whose finalizer keeps the object after its
containers are gone. The Node may only go once all three are gone.
"""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from tests.e2e.conftest import System
from tests.support import eventually
from tests.support.conditions import is_true
from tests.support.resources import DEPLOYMENTS, MACHINES

from machinepool.api import constants as c
from machinepool.api.conditions import get_condition
from machinepool.controlplane import PodLifecycle
from machinepool.runtime import PDBS, PODS, FuncHandler, Informer, Obj
from machinepool.simworld.kubelet.node import STOP_SECONDS_ANNOTATION

APP = "web"
REPLICAS = 6
"""Two Pods on each of the pool's three Nodes."""
MAX_UNAVAILABLE = 1
DRAIN_WAIT = 240.0
"""Bound of the scale-down: each eviction the budget refuses is retried by the Machine
controller 20 s later, and the victim's two Pods can only go one after the other."""


@pytest.fixture
def workload_pods() -> PodLifecycle:
    return PodLifecycle()


def _deployment() -> Obj:
    """``REPLICAS`` Pods spread one apart at most across the schedulable Nodes: a tainted
    (cordoned, not yet ready) Node is not counted, so evicted Pods may go to the others."""
    labels = {"app": APP}
    spread = {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": labels},
        "nodeTaintsPolicy": "Honor",
    }
    container = {
        "name": APP,
        "image": "registry.invalid/web:1",
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
    }
    return {
        "metadata": {"name": APP},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "automountServiceAccountToken": False,
                    "containers": [container],
                    "topologySpreadConstraints": [spread],
                },
            },
        },
    }


def _ready(pod: Obj) -> bool:
    return is_true(pod, "Ready")


def _healthy(pod: Obj) -> bool:
    """What the disruption controller counts: Ready, and not on its way out."""
    return _ready(pod) and not pod["metadata"].get("deletionTimestamp")


def _evicted(pod: Obj) -> bool:
    """Whether the Eviction API ended it: the apiserver marks such a Pod before deleting it
    (the pod garbage collector and the taint manager mark theirs with other reasons)."""
    return any(
        cond.get("type") == "DisruptionTarget" and cond.get("reason") == "EvictionByEvictionAPI"
        for cond in (pod.get("status") or {}).get("conditions") or []
    )


class PodJournal:
    """What the Pod and Node watches showed while the pool shrank."""

    def __init__(self, pods: Informer, victim_node: str) -> None:
        self.pods = pods
        self.victim_node = victim_node
        self.fewest_healthy = len(self.healthy())
        self.evicted: set[str] = set()
        self.on_victim_when_it_went: list[str] | None = None

    def healthy(self) -> list[Obj]:
        return [p for p in self.pods.list("default") if _healthy(p)]

    def on_pod(self, pod: Obj) -> None:
        self.fewest_healthy = min(self.fewest_healthy, len(self.healthy()))
        if _evicted(pod):
            self.evicted.add(pod["metadata"]["name"])

    def on_node_deleted(self, node: Obj) -> None:
        if node["metadata"]["name"] == self.victim_node:
            self.on_victim_when_it_went = [
                p["metadata"]["name"]
                for p in self.pods.list("default")
                if p["spec"].get("nodeName") == self.victim_node
            ]


async def test_scale_down_moves_a_deployment_within_its_budget(system: System) -> None:
    await system.create_pool("workers", 3)
    await system.until(lambda: system.pool_running("workers", 3), "3 Ready nodes")
    # Until the core lifts its uninitialized taint and the node lifecycle controller the
    # not-ready one, a Node takes no Pods and the spread would skip it.
    await system.until(
        lambda: all(not n["spec"].get("taints") for n in system.nodes.list()),
        "every Node schedulable",
    )
    wl = system.workload_client
    pods = system.follow(Informer(wl, PODS, namespaces=("default",)))
    await pods.start()
    try:
        await pods.wait_synced()
        budget = {"maxUnavailable": MAX_UNAVAILABLE, "selector": {"matchLabels": {"app": APP}}}
        await wl.create(PDBS, {"metadata": {"name": APP}, "spec": budget}, "default")
        await wl.create(DEPLOYMENTS, _deployment(), "default")
        await system.until(
            lambda: len([p for p in pods.list("default") if _healthy(p)]) == REPLICAS,
            f"{REPLICAS} Pods of the Deployment scheduled and Ready",
        )
        placed = _pods_by_node(pods)
        assert sorted(len(v) for v in placed.values()) == [2, 2, 2], placed

        async def one_disruption_allowed() -> bool:
            pdb = await wl.get(PDBS, APP, "default")
            return bool((pdb.get("status") or {}).get("disruptionsAllowed") == MAX_UNAVAILABLE)

        await eventually(one_disruption_allowed, "the disruption controller allows one eviction")

        victim = sorted(m["metadata"]["name"] for m in system.machines("workers"))[0]
        victim_node = system.node_of(victim)
        assert victim_node is not None
        node_name = victim_node["metadata"]["name"]
        first_pods = set(placed[node_name])
        journal = PodJournal(pods, node_name)
        pods.add_handler(
            FuncHandler(journal.on_pod, lambda _o, p: journal.on_pod(p), journal.on_pod)
        )
        system.nodes.add_handler(FuncHandler(delete=journal.on_node_deleted))

        annotation = {"metadata": {"annotations": {c.DELETE_MACHINE_ANNOTATION: "yes"}}}
        await system.client.patch(MACHINES, victim, annotation, system.namespace)
        await system.scale("workers", 2)

        def moved() -> bool:
            survivors = {n["metadata"]["name"] for n in system.nodes.list()}
            healthy = [p for p in pods.list("default") if _healthy(p)]
            return (
                system.nodes.get(node_name) is None
                and system.pool_running("workers", 2)
                and len(healthy) == REPLICAS
                and all(p["spec"]["nodeName"] in survivors for p in healthy)
            )

        await system.until(moved, "the victim's Pods on the other Nodes, and it gone", DRAIN_WAIT)
        floor = REPLICAS - MAX_UNAVAILABLE
        assert journal.fewest_healthy >= floor, (
            f"the Deployment fell to {journal.fewest_healthy} healthy Pods; its budget keeps "
            f"{floor}"
        )
        assert journal.evicted >= first_pods, (
            f"Pods of {node_name} that did not go through the Eviction API: "
            f"{sorted(first_pods - journal.evicted)}"
        )
        assert journal.on_victim_when_it_went == [], (
            f"Pods still bound to {node_name} when it was deleted: {journal.on_victim_when_it_went}"
        )
        final = pods.list("default")
        assert not first_pods & {p["metadata"]["name"] for p in final}
        assert all(
            ref["kind"] == "ReplicaSet" for p in final for ref in p["metadata"]["ownerReferences"]
        )

        async def available() -> bool:
            status = (await wl.get(DEPLOYMENTS, APP, "default")).get("status") or {}
            return status.get("availableReplicas") == REPLICAS

        await eventually(available, f"the Deployment reporting {REPLICAS} available")
    finally:
        await pods.stop()


def _pods_by_node(pods: Informer) -> dict[str, list[str]]:
    placed: dict[str, list[str]] = {}
    for pod in pods.list("default"):
        placed.setdefault(pod["spec"].get("nodeName") or "", []).append(pod["metadata"]["name"])
    return placed


HOLD_FINALIZER = "example.com/hold"
SLOW_STOP_SECONDS = 4
"""The ``slow`` Pod's containers exit this long after they are asked to stop."""
STUBBORN_GRACE_SECONDS = 3
"""The ``stubborn`` Pod ignores SIGTERM: it is killed when this grace period ends."""


def _pinned_pod(name: str, node: str, *, grace: int, stop: int | None = None) -> Obj:
    """A bare Pod bound to ``node`` (no scheduler involved), tolerating the cordon's taint."""
    meta: Obj = {"name": name}
    if stop is not None:
        meta["annotations"] = {STOP_SECONDS_ANNOTATION: str(stop)}
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": grace,
            "automountServiceAccountToken": False,
            "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
        },
    }


class EndJournal:
    """When each Pod was seen asked to stop and seen gone, the exit code its kubelet reported,
    and which Pods were still bound to the victim when its Node was deleted."""

    def __init__(self, pods: Informer, victim_node: str) -> None:
        self.pods = pods
        self.victim_node = victim_node
        self.asked: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.exit_codes: dict[str, int] = {}
        self.on_victim_when_it_went: list[str] | None = None

    def on_pod(self, pod: Obj) -> None:
        name = pod["metadata"]["name"]
        meta = pod["metadata"]
        if meta.get("deletionTimestamp") and name not in self.asked:
            # When the API server was asked, by its own stamp (deletionTimestamp is the request
            # time plus the grace period, to the second), not when the watch brought it here:
            # a late event would shorten the Pod's measured life.
            deadline = datetime.fromisoformat(str(meta["deletionTimestamp"]).replace("Z", "+00:00"))
            grace = float(meta.get("deletionGracePeriodSeconds") or 0)
            self.asked[name] = min(time.time(), deadline.timestamp() - grace)
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = (status.get("state") or {}).get("terminated")
            if ended:
                self.exit_codes[name] = int(ended["exitCode"])

    def on_pod_deleted(self, pod: Obj) -> None:
        self.on_pod(pod)
        self.gone.setdefault(pod["metadata"]["name"], time.time())

    def lived(self, name: str) -> float:
        """Seconds from the stop asked (the server's stamp) to the object gone (as the watch
        saw it): never less than the Pod's real life."""
        return self.gone[name] - self.asked[name]

    def on_node_deleted(self, node: Obj) -> None:
        if node["metadata"]["name"] == self.victim_node:
            self.on_victim_when_it_went = sorted(
                p["metadata"]["name"]
                for p in self.pods.list("default")
                if p["spec"].get("nodeName") == self.victim_node
            )


async def test_drain_waits_for_grace_periods_and_finalizers(system: System) -> None:
    await system.create_pool("holders", 2)
    await system.until(lambda: system.pool_running("holders", 2), "2 Ready nodes")
    victim = sorted(m["metadata"]["name"] for m in system.machines("holders"))[0]
    victim_node = system.node_of(victim)
    assert victim_node is not None
    node_name = victim_node["metadata"]["name"]
    wl = system.workload_client
    pods = system.follow(Informer(wl, PODS, namespaces=("default",)))
    await pods.start()
    try:
        await pods.wait_synced()
        journal = EndJournal(pods, node_name)
        pods.add_handler(
            FuncHandler(journal.on_pod, lambda _o, p: journal.on_pod(p), journal.on_pod_deleted)
        )
        system.nodes.add_handler(FuncHandler(delete=journal.on_node_deleted))
        slow = _pinned_pod("slow", node_name, grace=30, stop=SLOW_STOP_SECONDS)
        stubborn = _pinned_pod("stubborn", node_name, grace=STUBBORN_GRACE_SECONDS, stop=600)
        held = _pinned_pod("held", node_name, grace=30)
        held["metadata"]["finalizers"] = [HOLD_FINALIZER]
        for pod in (slow, stubborn, held):
            await wl.create(PODS, pod, "default")
        await system.until(
            lambda: (
                all((p.get("status") or {}).get("phase") == "Running" for p in pods.list("default"))
                and len(pods.list("default")) == 3
            ),
            "the three Pods Running on the victim's Node",
        )

        annotation = {"metadata": {"annotations": {c.DELETE_MACHINE_ANNOTATION: "yes"}}}
        await system.client.patch(MACHINES, victim, annotation, system.namespace)
        await system.scale("holders", 1)

        def drain_waits_for_held() -> bool:
            machine = system.watched["machines"].get(victim, system.namespace) or {}
            deleting = get_condition(
                (machine.get("status") or {}).get("conditions"), c.DELETING_CONDITION
            )
            message = str((deleting or {}).get("message") or "")
            return (
                "slow" in journal.gone
                and "stubborn" in journal.gone
                and journal.exit_codes.get("held") == 0
                and "waiting for deletion: default/held" in message
            )

        await system.until(
            drain_waits_for_held,
            "the stopping Pods gone and the drain waiting for the held one",
            DRAIN_WAIT,
        )
        assert system.nodes.get(node_name) is not None, "the Node went while a Pod was held"
        assert journal.on_victim_when_it_went is None

        await wl.patch(PODS, "held", {"metadata": {"finalizers": None}}, "default")
        await system.until(
            lambda: system.nodes.get(node_name) is None and system.pool_running("holders", 1),
            "the held Pod released, the victim's Node gone and the pool at 1",
            DRAIN_WAIT,
        )
        assert journal.on_victim_when_it_went == [], (
            f"Pods still bound to {node_name} when it was deleted: {journal.on_victim_when_it_went}"
        )
        # Lower bounds only: a loaded machine can make a stop slower, never faster.
        assert journal.lived("slow") >= SLOW_STOP_SECONDS - 0.5, (
            f"the slow Pod went {journal.lived('slow'):.1f}s after it was asked to stop; its"
            f" containers take {SLOW_STOP_SECONDS}s"
        )
        assert journal.exit_codes.get("slow") == 0, journal.exit_codes
        assert journal.lived("stubborn") >= STUBBORN_GRACE_SECONDS - 0.5, (
            f"the stubborn Pod went {journal.lived('stubborn'):.1f}s after it was asked to stop;"
            f" its grace period is {STUBBORN_GRACE_SECONDS}s"
        )
        assert journal.exit_codes.get("stubborn") == 137, journal.exit_codes
    finally:
        await pods.stop()
