"""Which MachinePool events wake the KubeadmConfig controller: adds, deletes, and updates of
what its reconcile reads (the config reference, the Cluster name, whether a Node joined);
never the scale and status writes a pool sees all the time."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from machinepool.bootstrap.kubeadm.controller import PoolEvents
from machinepool.runtime import Obj


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def on_add(self, obj: Obj, initial: bool = False) -> None:
        self.calls.append(("listed" if initial else "add", obj["metadata"]["name"]))

    def on_update(self, old: Obj, new: Obj) -> None:
        self.calls.append(("update", new["metadata"]["name"]))

    def on_delete(self, obj: Obj) -> None:
        self.calls.append(("delete", obj["metadata"]["name"]))


def pool(**status: Any) -> Obj:
    return {
        "metadata": {"name": "workers", "namespace": "ns", "resourceVersion": "1"},
        "spec": {
            "clusterName": "c1",
            "replicas": 1,
            "template": {
                "spec": {
                    "bootstrap": {
                        "configRef": {
                            "apiGroup": "bootstrap.cluster.x-k8s.io",
                            "kind": "KubeadmConfig",
                            "name": "workers",
                        }
                    }
                }
            },
        },
        "status": status,
    }


def changed(obj: Obj, path: str, value: Any) -> Obj:
    new = copy.deepcopy(obj)
    *parents, leaf = path.split(".")
    node = new
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    new["metadata"]["resourceVersion"] = "2"
    return new


def test_adds_and_deletes_always_pass() -> None:
    inner = Recorder()
    events = PoolEvents(inner)
    events.on_add(pool())
    events.on_add(pool(), initial=True)  # merely listed: the controller queues it low
    events.on_delete(pool())
    assert inner.calls == [("add", "workers"), ("listed", "workers"), ("delete", "workers")]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.replicas", 5),
        ("status.replicas", 3),
        ("status.phase", "ScalingUp"),
        ("status.nodeRefs", [{"name": "n1"}, {"name": "n2"}]),  # still some Node
        ("metadata.annotations", {"a": "b"}),
    ],
)
def test_updates_a_reconcile_does_not_read_are_dropped(path: str, value: Any) -> None:
    inner = Recorder()
    old = pool(nodeRefs=[{"name": "n1"}])
    PoolEvents(inner).on_update(old, changed(old, path, value))
    assert inner.calls == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("status.nodeRefs", [{"name": "n1"}]),  # the first Node: refresh turns into rotation
        ("spec.clusterName", "c2"),
        ("spec.template.spec.bootstrap.configRef.name", "other"),
    ],
)
def test_updates_a_reconcile_reads_pass(path: str, value: Any) -> None:
    inner = Recorder()
    old = pool()
    PoolEvents(inner).on_update(old, changed(old, path, value))
    assert inner.calls == [("update", "workers")]
