"""End to end: simulated kubelets join through TLS bootstrap and can write only themselves.

The workload cluster admits kubelets as a kubeadm cluster does (``NodeAuth``): the Node
authorizer and NodeRestriction admission, kube-controller-manager approving and signing
kubelet client CSRs with the cluster CA, and kubeadm's RBAC for bootstrap tokens. The node
simulator runs with ``kubelet_tls_bootstrap``: each instance trades its bootstrap token for
a certificate for ``system:node:<name>`` and writes its Node, status and Lease with it.

What a user could check on their own cluster: the approved CSRs (one per Node, requested by
a bootstrap token, issued to ``system:node:<name>``), the apiserver's audit log (every Node
created by the node itself, none by anyone else), and that a node's certificate is refused
(403) for another Node's status while its own is accepted.
"""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from tests.e2e.conftest import System
from tests.support import eventually
from tests.support.conditions import is_true

from machinepool.controlplane import NodeAuth
from machinepool.runtime import (
    LEASES,
    NODES,
    PODS,
    ApiError,
    ClusterCache,
    Forbidden,
    Informer,
    Manager,
    Obj,
    Resource,
)
from machinepool.simworld import kubelet
from machinepool.simworld.kubelet import KubeletOptions

CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
KUBELET_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
CSRS = Resource(
    "certificates.k8s.io", "v1", "certificatesigningrequests", "CertificateSigningRequest", False
)


@pytest.fixture
def workload_node_auth() -> NodeAuth:
    return NodeAuth()


@pytest.fixture
def kubelet_options() -> KubeletOptions:
    return KubeletOptions(
        kubelet_heartbeat_seconds=20.0,
        node_monitor_grace_seconds=5.0,
        kubelet_tls_bootstrap=True,
    )


def _subject(cert_pem: bytes) -> tuple[str, list[str]]:
    name = x509.load_pem_x509_certificate(cert_pem).subject
    cn = name.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    orgs = [a.value for a in name.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    return str(cn), [str(o) for o in orgs]


def _approved(csr: Obj) -> bool:
    return is_true(csr, "Approved")


def _audited(system: System, resource: str) -> list[Obj]:
    """The audit log's writes (create, update, patch, delete) of ``resource``."""
    events = []
    for line in system.workload.audit_log.read_text().splitlines():
        event = json.loads(line)
        if (event.get("objectRef") or {}).get("resource") == resource:
            events.append(event)
    return events


async def test_a_pools_nodes_join_through_csrs_and_create_themselves(system: System) -> None:
    await system.create_pool("workers", 3)
    await system.until(lambda: system.pool_running("workers", 3), "3 Ready nodes, Running")
    names = {n["metadata"]["name"] for n in system.nodes.list()}
    assert len(names) == 3

    # One approved, signed kubelet CSR per Node, requested with a bootstrap token.
    csrs = (await system.workload_client.request("GET", CSR_PATH))["items"]
    issued: dict[str, Obj] = {}
    for csr in csrs:
        cert = (csr.get("status") or {}).get("certificate")
        if csr["spec"]["signerName"] != KUBELET_SIGNER or not cert:
            continue
        cn, orgs = _subject(base64.b64decode(cert))
        assert orgs == ["system:nodes"], csr["metadata"]["name"]
        issued[cn] = csr
    assert set(issued) == {f"system:node:{name}" for name in names}
    for csr in issued.values():
        assert _approved(csr), csr["metadata"]["name"]
        assert csr["spec"]["username"].startswith("system:bootstrap:"), csr["spec"]["username"]
        assert "system:bootstrappers:kubeadm:default-node-token" in csr["spec"]["groups"]

    # Each Node was created by its own node identity, and by no one else.
    writes = _audited(system, "nodes")
    creates = [e for e in writes if e["verb"] == "create"]
    assert sorted(e["objectRef"]["name"] for e in creates) == sorted(names)
    for event in creates:
        assert event["user"]["username"] == f"system:node:{event['objectRef']['name']}", event
        assert event["responseStatus"]["code"] == 201, event
    # Heartbeats too: every Node status write came from the Node itself.
    for event in writes:
        if event["objectRef"].get("subresource") == "status":
            assert event["user"]["username"] == f"system:node:{event['objectRef']['name']}"


async def test_a_nodes_certificate_writes_its_own_node_only(system: System) -> None:
    await system.create_pool("workers", 2)
    await system.until(lambda: system.pool_running("workers", 2), "2 Ready nodes, Running")
    own, other = sorted(n["metadata"]["name"] for n in system.nodes.list())
    cert = system.kubelet.node_certificate(own)
    assert cert is not None, f"the simulator holds no certificate for {own}"
    assert _subject(cert.credentials.cert_pem)[0] == f"system:node:{own}"
    patch = {"status": {"allocatable": {"pods": "109"}}}
    async with cert.client() as as_node:
        with pytest.raises(Forbidden):
            await as_node.patch(NODES, other, patch, subresource="status")
        with pytest.raises(Forbidden):  # nor may it register a Node of another name
            await as_node.create(
                NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "intruder"}}
            )
        patched = await as_node.patch(NODES, own, patch, subresource="status")
    assert patched["status"]["allocatable"]["pods"] == "109"
    untouched = await system.workload_client.get(NODES, other)
    assert untouched["status"]["allocatable"]["pods"] != "109"


async def _create_pod(system: System, body: Obj) -> None:
    """Create a Pod in ``default``, once its ServiceAccount exists (a new cluster's
    controller-manager makes it within a second or two)."""
    for _ in range(100):
        try:
            await system.workload_client.create(PODS, body, "default")
            return
        except ApiError as exc:
            if "serviceaccount" not in str(exc).lower():
                raise
            await asyncio.sleep(0.2)
    raise AssertionError("no default ServiceAccount in the workload cluster")


async def test_a_nodes_pods_are_run_and_let_go_with_its_own_certificate(system: System) -> None:
    await system.create_pool("workers", 1)
    await system.until(lambda: system.pool_running("workers", 1), "1 Ready node, Running")
    (node,) = [n["metadata"]["name"] for n in system.nodes.list()]
    pods = system.follow(Informer(system.workload_client, PODS, namespaces=("default",)))
    await pods.start()
    try:
        await pods.wait_synced()
        await _create_pod(
            system,
            {
                "metadata": {"name": "bound"},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        )

        def phase() -> str:
            return str(((pods.get("bound", "default") or {}).get("status") or {}).get("phase"))

        await system.until(lambda: phase() == "Running", "the Pod Running")
        await system.workload_client.delete(PODS, "bound", "default")
        await system.until(lambda: pods.get("bound", "default") is None, "the Pod gone")
    finally:
        await pods.stop()
    by_node = f"system:node:{node}"
    statuses = [e for e in _audited(system, "pods") if e["objectRef"].get("subresource")]
    assert {e["user"]["username"] for e in statuses} == {by_node}, statuses
    # An audit event's last stage is logged after the response is sent, so the Pod can leave
    # the watch a moment before the delete that confirmed it reaches the log.
    confirmations = await eventually(
        lambda: [
            e
            for e in _audited(system, "pods")
            if e["verb"] == "delete" and e["user"]["username"] != "admin"
        ],
        "the Pod's confirming delete in the audit log",
    )
    assert [e["user"]["username"] for e in confirmations] == [by_node]
    leases = _audited(system, "leases")
    assert {e["user"]["username"] for e in leases} == {by_node}, leases


async def test_a_restarted_simulator_bootstraps_its_nodes_again(
    system: System, kubelet_options: KubeletOptions
) -> None:
    """Certificates live in the node simulator's memory: a new simulator process holds none,
    and each running instance gets a new one with its (still valid) bootstrap token before it
    renews its Lease again."""
    await system.create_pool("workers", 1)
    await system.until(lambda: system.pool_running("workers", 1), "1 Ready node, Running")
    (node,) = [n["metadata"]["name"] for n in system.nodes.list()]
    csrs = system.follow(Informer(system.workload_client, CSRS))
    await csrs.start()

    def issued() -> list[Obj]:
        return [
            c
            for c in csrs.list()
            if (c.get("status") or {}).get("certificate")
            and _subject(base64.b64decode(c["status"]["certificate"]))[0] == f"system:node:{node}"
        ]

    await csrs.wait_synced()
    (first,) = [c["metadata"]["name"] for c in issued()]
    await system.manager.stop()  # every controller, the node simulator with them
    restarted = Manager(system.client, leader_election=None, bind_address="127.0.0.1:0")
    cache = ClusterCache(system.client, probe_interval=5.0)
    simulator = await kubelet.wire(restarted, cache, kubelet_options)
    assert simulator.node_certificate(node) is None
    renewed_before = (await system.workload_client.get(LEASES, node, "kube-node-lease"))["spec"][
        "renewTime"
    ]
    await restarted.start()
    try:
        await system.until(lambda: len(issued()) == 2, "a second certificate for the Node")
        (second,) = [c["metadata"]["name"] for c in issued() if c["metadata"]["name"] != first]
        for _ in range(100):  # the first look after a restart renews the Lease, as the node
            lease = await system.workload_client.get(LEASES, node, "kube-node-lease")
            if lease["spec"]["renewTime"] != renewed_before:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the Lease was not renewed after the restart")
        cert = simulator.node_certificate(node)
        assert cert is not None
        assert cert.csr == second
    finally:
        await restarted.stop()
        await cache.stop()
        await csrs.stop()
    lease_writes = [e for e in _audited(system, "leases") if e["objectRef"]["name"] == node]
    assert {e["user"]["username"] for e in lease_writes} == {f"system:node:{node}"}
