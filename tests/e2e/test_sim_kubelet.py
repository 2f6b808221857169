"""End to end: the node simulator registers Nodes as a kubelet on a real cloud would.

A Node is named after its instance's hostname (``ip-10-1-2-3.sim.internal``, from the private
address the Sim cloud gave it) or after the JoinConfiguration's ``nodeRegistration.name``,
rendered from the instance's metadata as cloud-init renders it; never after the instance id.
What a user sees is checked: ``kubectl get nodes``, and the MachinePool's ``status.nodeRefs``
and each Machine's ``status.nodeRef`` naming those Nodes.

Each Node holds a Lease in ``kube-node-lease`` that its kubelet renews (here every second, so
renewals are counted in seconds) and that a stopped kubelet no longer renews.
"""

from __future__ import annotations

import pytest
from tests.e2e.clients.harness import kubectl
from tests.e2e.conftest import System
from tests.support.builders import pool_objects
from tests.support.conditions import condition_status

from machinepool.runtime import LEASES, FuncHandler, Informer, Obj
from machinepool.simworld import InstanceRecord
from machinepool.simworld.kubelet import KubeletOptions

NODE_LEASES = "kube-node-lease"

SIM_SPEC = {"template": {"instanceType": "sim.small", "image": "sim"}}


@pytest.fixture
def kubelet_options() -> KubeletOptions:
    """The suite's settings with Leases renewed every second (kubelet's 10 s would make the
    renewals below take a minute to count)."""
    return KubeletOptions(
        kubelet_heartbeat_seconds=20.0,
        node_monitor_grace_seconds=5.0,
        kubelet_lease_renew_seconds=1.0,
        kubelet_tls_bootstrap=True,
    )


def kubectl_nodes(system: System) -> dict[str, tuple[str, str]]:
    """``kubectl get nodes``: each Node's name -> (providerID, InternalIP)."""
    columns = (
        "NAME:.metadata.name,PROVIDER:.spec.providerID,"
        "IP:.status.addresses[?(@.type=='InternalIP')].address"
    )
    kubeconfig = system.workload.kubeconfig
    result = kubectl(kubeconfig, "get", "nodes", "--no-headers", f"-o=custom-columns={columns}")
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line.strip()]
    return {name: (pid, ip) for name, pid, ip in rows}


def instance_of(provider_id: str) -> str:
    """The instance id in a Sim providerID (``sim:///<zone>/<instance>``)."""
    return provider_id.rpartition("/")[2]


def assert_refs_name(system: System, pool: str, nodes: dict[str, tuple[str, str]]) -> None:
    """The MachinePool's nodeRefs and each Machine's nodeRef name exactly the pool's Nodes,
    each Machine the Node of its own providerID."""
    mp = system.machine_pool(pool) or {}
    assert {r["name"] for r in mp["status"]["nodeRefs"]} == set(nodes)
    by_pid = {pid: name for name, (pid, _ip) in nodes.items()}
    machines = system.machines(pool)
    assert len(machines) == len(nodes)
    for machine in machines:
        assert machine["status"]["nodeRef"]["name"] == by_pid[machine["spec"]["providerID"]]


async def test_nodes_are_named_after_their_hostnames_not_their_instance_ids(
    system: System,
) -> None:
    """Without ``nodeRegistration.name`` a kubelet registers under its hostname."""
    await system.create_pool("hosts", 3)
    await system.until(lambda: system.pool_running("hosts", 3), "3 Ready nodes, Running")
    nodes = kubectl_nodes(system)
    records = {r.id: r for r in await system.cloud.instances(system.namespace, "hosts")}
    assert len(nodes) == 3
    for name, (pid, ip) in nodes.items():
        record = records[instance_of(pid)]
        assert name != record.id
        assert name == record.hostname == f"ip-{ip.replace('.', '-')}.sim.internal"
        assert ip == record.private_ip
    assert len({ip for _pid, ip in nodes.values()}) == 3
    assert_refs_name(system, "hosts", nodes)


async def test_a_node_takes_the_name_its_join_configuration_renders(system: System) -> None:
    """``nodeRegistration.name`` set to a cloud-init template is rendered from the instance's
    metadata (here its zone and hostname, so the name differs from the hostname alone)."""
    template = "{{ v1.availability_zone }}.{{ ds.meta_data['local_hostname'] }}"
    objects = pool_objects(
        system.namespace, "templated", sim_spec=SIM_SPEC, replicas=2, cluster=system.cluster
    )
    config = objects[0][1]
    config["spec"] = {"joinConfiguration": {"nodeRegistration": {"name": template}}}
    for resource, body in objects:
        await system.client.create(resource, body, system.namespace)
    await system.until(lambda: system.pool_running("templated", 2), "2 Ready nodes, Running")
    nodes = kubectl_nodes(system)
    records: dict[str, InstanceRecord] = {
        r.id: r for r in await system.cloud.instances(system.namespace, "templated")
    }
    assert len(nodes) == 2
    for name, (pid, _ip) in nodes.items():
        record = records[instance_of(pid)]
        assert name == f"{record.failure_domain}.{record.hostname}"
    assert_refs_name(system, "templated", nodes)


async def test_a_node_lease_is_renewed_until_its_kubelet_stops(system: System) -> None:
    """Each Node's Lease (held by the Node, owned by it, 40 s) advances while its kubelet
    runs, comes back when deleted, and stops advancing once the kubelet is stopped: over
    the next four renewals of the other Node's Lease it moves at most once (a renewal that
    was under way when the kubelet stopped), and the Node turns Unknown."""
    renewals: dict[str, list[str]] = {}

    def seen(lease: Obj) -> None:
        times = renewals.setdefault(lease["metadata"]["name"], [])
        renewed = str((lease.get("spec") or {}).get("renewTime") or "")
        if renewed and (not times or times[-1] != renewed):
            times.append(renewed)

    leases = Informer(system.workload_client, LEASES, NODE_LEASES)
    leases.add_handler(FuncHandler(add=seen, update=lambda _old, new: seen(new)))
    await system.watch("leases", leases)
    await leases.start()
    try:
        await leases.wait_synced()
        await system.create_pool("leased", 2)
        await system.until(lambda: system.pool_running("leased", 2), "2 Ready nodes, Running")
        healthy_machine, stopped_machine = sorted(
            m["metadata"]["name"] for m in system.machines("leased")
        )
        healthy_node, stopped_node = (
            system.node_of(healthy_machine),
            system.node_of(stopped_machine),
        )
        assert healthy_node is not None
        assert stopped_node is not None
        healthy, stopped = healthy_node["metadata"]["name"], stopped_node["metadata"]["name"]

        def renewed(name: str) -> int:
            return len(renewals.get(name, []))

        await system.until(
            lambda: renewed(healthy) >= 3 and renewed(stopped) >= 3,
            "both Nodes' Leases renewed three times",
        )
        lease = leases.get(stopped, NODE_LEASES)
        assert lease is not None
        assert lease["spec"]["holderIdentity"] == stopped
        assert lease["spec"]["leaseDurationSeconds"] == 40
        owner = {"apiVersion": "v1", "kind": "Node", "name": stopped}
        assert lease["metadata"]["ownerReferences"] == [
            {**owner, "uid": stopped_node["metadata"]["uid"]}
        ]

        # A Lease that went missing is created again.
        await system.workload_client.delete(LEASES, healthy, NODE_LEASES)
        await system.until(
            lambda: leases.get(healthy, NODE_LEASES) is not None, "the deleted Lease back"
        )

        await system.cloud.stop_kubelet(system.namespace, stopped_machine)
        stopped_at, healthy_at = renewed(stopped), renewed(healthy)

        def node_ready(name: str) -> str:
            return condition_status(system.nodes.get(name), "Ready")

        await system.until(
            lambda: renewed(healthy) >= healthy_at + 4 and node_ready(stopped) == "Unknown",
            "four more renewals of the running kubelet's Lease, the stopped one's Node Unknown",
        )
        assert renewed(stopped) <= stopped_at + 1, renewals[stopped]
        assert renewals[stopped][-1] < renewals[healthy][-1]
        assert node_ready(healthy) == "True"
    finally:
        await leases.stop()
