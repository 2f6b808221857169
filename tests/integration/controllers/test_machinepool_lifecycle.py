"""MachinePool scenarios against the real control plane: finalizer, owner references, phases,
readiness of bootstrap and infrastructure, node matching and patching, deletion."""

from __future__ import annotations

from tests.support.conditions import condition
from tests.support.resources import KUBEADM_CONFIGS, MACHINE_POOLS

from machinepool.api import constants as c
from machinepool.runtime import NODES, FuncHandler, NotFound, Obj

from .conftest import TEST_POOLS, Env


async def test_a_new_pools_finalizer_comes_with_its_cluster_owner_in_one_write(
    env: Env,
) -> None:
    """Every version of a new MachinePool that carries the finalizer also carries the Cluster
    ownerReference and label: the core writes a new pool's metadata once, not twice. A pool
    paused from its creation gets the finalizer alone and no owner, as upstream's does."""
    seen: list[Obj] = []

    def record(obj: Obj) -> None:
        if obj["metadata"]["name"] in ("first", "held"):
            seen.append(obj)

    env.pools.informer.add_handler(FuncHandler(record, lambda _old, new: record(new), record))
    await env.kubeadm_config("boot")
    await env.infra_pool("first")
    await env.machine_pool("first", replicas=1, bootstrap="boot")
    await env.pool_until("first", lambda o: bool(o["status"].get("phase")))
    await env.infra_pool("held")
    await env.machine_pool(
        "held", replicas=1, bootstrap="boot", annotations={c.PAUSED_ANNOTATION: ""}
    )
    await env.pool_until("held", lambda o: condition(o, c.PAUSED_CONDITION).get("status") == "True")

    def with_finalizer(name: str) -> list[Obj]:
        return [
            o
            for o in seen
            if o["metadata"]["name"] == name
            and c.MACHINE_POOL_FINALIZER in (o["metadata"].get("finalizers") or [])
        ]

    assert with_finalizer("first"), seen
    for version in with_finalizer("first"):
        owners = [r["kind"] for r in version["metadata"].get("ownerReferences") or []]
        assert owners == ["Cluster"], version["metadata"]
        assert version["metadata"]["labels"][c.CLUSTER_NAME_LABEL] == env.cluster_name
    assert with_finalizer("held"), seen
    for version in with_finalizer("held"):
        assert not version["metadata"].get("ownerReferences"), version["metadata"]


async def test_happy_path_through_every_phase(env: Env) -> None:
    await env.kubeadm_config("boot")
    await env.infra_pool("pool")
    await env.machine_pool("pool", replicas=2, bootstrap="boot")

    mp = await env.pool_until("pool", lambda o: o["status"].get("phase") == c.PHASE_PENDING)
    assert c.MACHINE_POOL_FINALIZER in mp["metadata"]["finalizers"]
    assert mp["metadata"]["labels"][c.CLUSTER_NAME_LABEL] == env.cluster_name
    owner = mp["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "Cluster"
    assert not owner.get("controller")
    assert condition(mp, c.BOOTSTRAP_CONFIG_READY_CONDITION)["status"] == "False"
    boot_ready = condition(mp, c.V1BETA1_BOOTSTRAP_READY_CONDITION, v1beta1=True)
    assert boot_ready.get("reason") == c.V1BETA1_WAITING_FOR_DATA_SECRET_FALLBACK_REASON, (
        __import__("json").dumps(mp["status"])
    )

    for res, name in ((KUBEADM_CONFIGS, "boot"), (TEST_POOLS, "pool")):
        obj = await env.client.get(res, name, env.namespace)
        ref = obj["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["controller"], ref["blockOwnerDeletion"]) == (
            "MachinePool",
            True,
            True,
        )
        assert obj["metadata"]["labels"][c.CLUSTER_NAME_LABEL] == env.cluster_name

    await env.bootstrap_ready("boot", "boot-data")
    mp = await env.pool_until("pool", lambda o: o["status"].get("phase") == c.PHASE_PROVISIONING)
    assert mp["spec"]["template"]["spec"]["bootstrap"]["dataSecretName"] == "boot-data"

    ids = ["test:///pool/0", "test:///pool/1"]
    await env.infra_provider_ids("pool", ids)
    await env.infra_status("pool", ready=True, replicas=2)
    await env.pool_until(
        "pool", lambda o: o["spec"].get("providerIDList") == ids and o["status"]["replicas"] == 2
    )

    await env.node(
        "n0",
        ids[0],
        taints=[
            {"key": c.UNINITIALIZED_TAINT_KEY, "effect": "NoSchedule"},
            {"key": "foreign", "value": "x", "effect": "NoSchedule"},
        ],
        annotations={"foreign/annotation": "keep"},
    )
    mp = await env.pool_until("pool", lambda o: o["status"].get("phase") == c.PHASE_SCALING_UP)
    await env.node("n1", ids[1])
    mp = await env.pool_until("pool", lambda o: o["status"].get("phase") == c.PHASE_RUNNING)
    assert [r["name"] for r in mp["status"]["nodeRefs"]] == ["n0", "n1"]
    assert mp["status"]["readyReplicas"] == 2
    assert mp["status"]["versions"] == [{"version": "v1.31.0", "replicas": 2}]
    assert mp["status"]["observedGeneration"] == mp["metadata"]["generation"]
    assert condition(mp, "Ready", v1beta1=True)["status"] == "True", mp["status"]["deprecated"]
    assert condition(mp, c.AVAILABLE_CONDITION)["status"] == "True"
    assert condition(mp, c.INFRASTRUCTURE_READY_CONDITION)["status"] == "True"

    n0 = await env.nodes.until(
        "n0",
        lambda n: (
            n is not None
            and n["metadata"]["annotations"].get(c.NODE_OWNER_NAME_ANNOTATION) == "pool"
            and not _has_uninitialized(n)
        ),
    )
    assert n0 is not None
    assert n0["metadata"]["annotations"]["foreign/annotation"] == "keep"
    assert n0["metadata"]["annotations"][c.NODE_OWNER_KIND_ANNOTATION] == "MachinePool"
    assert n0["metadata"]["annotations"][c.NODE_CLUSTER_NAMESPACE_ANNOTATION] == env.namespace
    # The apiserver adds its own not-ready taint at registration; that one stays too.
    assert {"key": "foreign", "value": "x", "effect": "NoSchedule"} in n0["spec"]["taints"]

    # Scale down: the provider drops an instance; its Node is retired.
    await env.client.patch(MACHINE_POOLS, "pool", {"spec": {"replicas": 1}}, env.namespace)
    mp = await env.pool_until("pool", lambda o: o["status"].get("phase") == c.PHASE_SCALING_DOWN)
    await env.infra_provider_ids("pool", ids[:1])
    await env.infra_status("pool", replicas=1)
    mp = await env.pool_until(
        "pool",
        lambda o: (
            o["status"].get("phase") == c.PHASE_RUNNING
            and len(o["status"].get("nodeRefs", [])) == 1
        ),
    )
    assert await env.nodes.until("n1", lambda n: n is None) is None

    # Delete: bootstrap config and infra pool go first, then the finalizer. As upstream, the
    # Node of an instance still in spec.providerIDList is not the core's to delete: its
    # instance goes with the infra pool, and the cloud's node lifecycle removes the Node.
    await env.client.delete(MACHINE_POOLS, "pool", env.namespace)
    assert await env.pools.until("pool", lambda o: o is None) is None
    for res, name in ((KUBEADM_CONFIGS, "boot"), (TEST_POOLS, "pool")):
        try:
            await env.client.get(res, name, env.namespace)
            raise AssertionError(f"{name} should be gone")
        except NotFound:
            pass
    assert await env.wclient.get(NODES, "n0"), "a listed instance's Node was deleted"


def _has_uninitialized(node: dict[str, object]) -> bool:
    taints = node.get("spec", {}).get("taints") or []  # type: ignore[attr-defined]
    return any(t.get("key") == c.UNINITIALIZED_TAINT_KEY for t in taints)
