"""End to end: the node simulator registers Nodes as a kubelet on a real cloud would.

A Node is named after its instance's hostname (``ip-10-1-2-3.sim.internal``, from the private
address the Sim cloud gave it) or after the JoinConfiguration's ``nodeRegistration.name``,
rendered from the instance's metadata as cloud-init renders it; never after the instance id.
What a user sees is checked: ``kubectl get nodes``, and the MachinePool's ``status.nodeRefs``
and each Machine's ``status.nodeRef`` naming those Nodes.
"""

from __future__ import annotations

from tests.e2e.clients.harness import kubectl
from tests.e2e.conftest import System
from tests.support.builders import pool_objects

from machinepool.sim import InstanceRecord

SIM_SPEC = {"template": {"instanceType": "sim.small", "image": "sim"}}


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
