"""Local Kubernetes control planes: one management cluster and any number of workload clusters.

The management cluster is etcd, a kube-apiserver and a kube-controller-manager (garbage
collector, namespaces, ServiceAccounts). A workload cluster is one more kube-apiserver on the
same etcd under its own ``--etcd-prefix``, with its own CA, bootstrap-token authentication
(so simulated nodes join as real kubeadm nodes do) and its own controller-manager (token
cleaner, garbage collector, namespaces, ServiceAccounts, PodDisruptionBudget status). A
workload cluster started with ``PodLifecycle`` is one a user's Pods can live in: its
controller-manager also runs the node lifecycle, pod garbage collector, Deployment and
ReplicaSet controllers, and a kube-scheduler binds its Pods. One started with ``NodeAuth`` admits
kubelets as a kubeadm cluster does: the Node authorizer and NodeRestriction admission, the CSR
approving and signing controllers, and kubeadm's RBAC for bootstrap tokens, so a node turns
its bootstrap token into a client certificate of its own that can write only itself. Every
process listens on a free loopback port; everything lives in one work directory. With
``node=RealNode()`` the management cluster also gets a real node (``controlplane.node``):
kubelet, containerd and kube-proxy in a network namespace of their own, and a scheduler.

Used by the pytest fixtures, the ``machinepool up`` / ``demo`` commands and the benchmarks.
The methods block: call them from the thread that owns the cluster (children are tied to it).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from machinepool.controlplane.binaries import BinariesNotFound, find_binaries
from machinepool.controlplane.node import Node, RealNode
from machinepool.controlplane.process import (
    Process,
    ProcessFailed,
    free_port,
    port_open,
    stop_all,
    wait_until,
)
from machinepool.runtime import pki

_START_TIMEOUT = 90.0
_PORT_ATTEMPTS = 5

_MANAGEMENT_CONTROLLERS = (
    "clusterrole-aggregation-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
)
_WORKLOAD_CONTROLLERS = (
    "disruption-controller",  # fills PodDisruptionBudget status, which evictions consult
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "token-cleaner-controller",
)
_REAL_NODE_CONTROLLERS = (
    "root-ca-certificate-publisher-controller",  # kube-root-ca.crt, in every Pod's token volume
    "endpoints-controller",  # Services' Endpoints: where the apiserver dials webhooks
    "endpointslice-controller",  # Services' EndpointSlices: what kube-proxy routes to
)
_POD_LIFECYCLE_CONTROLLERS = (
    "deployment-controller",
    "node-lifecycle-controller",  # Ready Unknown and unreachable taints; lifts not-ready
    "pod-garbage-collector-controller",
    "replicaset-controller",
)


@dataclass(frozen=True)
class PodLifecycle:
    """What a workload cluster runs, beyond its API, for Pods to live in it as in a user's
    cluster: a kube-scheduler, and the node lifecycle, pod garbage collector, Deployment and
    ReplicaSet controllers in its controller-manager.

    Off by default (``ControlPlane.start_workload(name)``): the node lifecycle controller
    judges every Node by its heartbeats and Lease renewals, and the benchmarks run the node
    simulator without Leases, where it would turn every Node Unknown. The scheduler comes
    with it: without that controller new Nodes keep the ``node.kubernetes.io/not-ready``
    taint admission gives them, and a scheduler would place nothing. Tests and tools that
    need Pods scheduled or evicted ask for both.

    The defaults are kube-controller-manager's own. A test that stops a kubelet shortens
    them so the Node turns Unknown in seconds; the grace period must stay well above the
    period at which the kubelets renew their Leases, or healthy Nodes turn Unknown too.
    """

    node_monitor_grace_seconds: float = 50.0
    """``--node-monitor-grace-period``: how long a Node may go without a heartbeat or Lease
    renewal before its Ready condition turns Unknown and it is tainted unreachable."""
    node_monitor_period_seconds: float = 5.0
    """``--node-monitor-period``: how often the node lifecycle controller checks."""

    def kcm_args(self) -> tuple[str, ...]:
        """The controller-manager flags that tune the node lifecycle controller."""
        return (
            f"--node-monitor-grace-period={_duration(self.node_monitor_grace_seconds)}",
            f"--node-monitor-period={_duration(self.node_monitor_period_seconds)}",
        )


_NODE_AUTH_CONTROLLERS = (
    "certificatesigningrequest-approving-controller",
    "certificatesigningrequest-signing-controller",
)
NODE_BOOTSTRAP_GROUP = "system:bootstrappers:kubeadm:default-node-token"
"""The group kubeadm's bootstrap tokens authenticate with (their ``auth-extra-groups``)."""
_KUBEADM_NODE_BINDINGS = (
    # (ClusterRoleBinding, ClusterRole, Group): what ``kubeadm init`` binds for joining nodes
    ("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", NODE_BOOTSTRAP_GROUP),
    (
        "kubeadm:node-autoapprove-bootstrap",
        "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        NODE_BOOTSTRAP_GROUP,
    ),
    (
        "kubeadm:node-autoapprove-certificate-rotation",
        "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        "system:nodes",
    ),
)
_NODE_AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Metadata",
            "resources": [
                {"group": "", "resources": ["nodes", "nodes/status", "pods", "pods/status"]},
                {"group": "coordination.k8s.io", "resources": ["leases"]},
            ],
            "namespaces": ["", "kube-node-lease", "default"],
            "verbs": ["create", "update", "patch", "delete"],
        },
        {"level": "None"},
    ],
}


@dataclass(frozen=True)
class NodeAuth:
    """How a workload cluster authenticates and confines its kubelets, as a kubeadm cluster
    does: kube-apiserver with ``--authorization-mode=Node,RBAC`` and NodeRestriction
    admission, kube-controller-manager approving and signing kubelet client CSRs with the
    cluster CA, and the ClusterRoleBindings ``kubeadm init`` creates for bootstrap tokens
    (group ``system:bootstrappers:kubeadm:default-node-token`` may create CSRs, which are
    approved; ``system:nodes`` may renew). A node (the node simulator with
    ``KubeletOptions.kubelet_tls_bootstrap``) then registers with a certificate for
    ``system:node:<name>``, and can write only its own Node, Lease and Pods' status.

    Off by default (``ControlPlane.start_workload(name)``): the admin client can do anything
    either way; this only adds the path for nodes with identities of their own.
    """

    audit: bool = True
    """Write who wrote what a kubelet writes (user, verb, object; Metadata level) to
    ``audit.log`` in the cluster's directory (``WorkloadCluster.audit_log``): Nodes and
    their status, Node Leases, and Pods (creations, status, deletions) in ``default``."""


def _duration(seconds: float) -> str:
    """A Go duration for a number of seconds (milliseconds kept)."""
    return f"{round(seconds * 1000)}ms"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class _Pki:
    """The certificates one cluster needs, written into its own folder."""

    def __init__(self, directory: Path, name: str, ip_addresses: tuple[str, ...] = ()) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.dir = directory
        self.ca = pki.new_ca(f"{name}-ca")
        self.ca_crt, self.ca_key = self.ca.write(directory, "ca")
        serving = pki.issue(
            self.ca,
            "kube-apiserver",
            dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            ip_addresses=("127.0.0.1", "10.0.0.1", *ip_addresses),
            server=True,
        )
        self.serving_crt, self.serving_key = serving.write(directory, "apiserver")
        self.admin = pki.issue(self.ca, "admin", organization="system:masters")
        # system:masters: the local controller-manager runs every controller under one identity.
        self.kcm = pki.issue(
            self.ca, "system:kube-controller-manager", organization="system:masters"
        )
        self.sa_key, self.sa_pub = pki.new_service_account_keys(directory)
        self._ssl: ssl.SSLContext | None = None

    def kubeconfig(self, server: str, user: str, client: pki.KeyPair) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": user,
                    "cluster": {
                        "server": server,
                        "certificate-authority-data": _b64(self.ca.cert_pem),
                    },
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": _b64(client.cert_pem),
                        "client-key-data": _b64(client.key_pem),
                    },
                }
            ],
            "contexts": [{"name": user, "context": {"cluster": user, "user": user}}],
            "current-context": user,
        }

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS context that trusts this cluster's CA and presents the admin certificate."""
        if self._ssl is None:
            ctx = ssl.create_default_context(cafile=str(self.ca_crt))
            crt, key = self.admin.write(self.dir, "admin")
            ctx.load_cert_chain(str(crt), str(key))
            self._ssl = ctx
        return self._ssl


def remembered_port(path: Path) -> int:
    """The port a kept work directory's server had last time, if nothing listens there now.

    A restarted cluster keeps its addresses: instances booted with the workload apiserver's
    endpoint in their bootstrap data must find it again after ``machinepool down`` and ``up``.
    0 (a new free port) when there is none, or the port is taken.
    """
    try:
        port = int(path.read_text())
    except (FileNotFoundError, ValueError):
        return 0
    return 0 if port_open(port) else port


class _ApiServerCluster:
    """A kube-apiserver plus controller-manager over a shared etcd: the part both kinds share.

    With ``pods`` (a ``PodLifecycle``), the controller-manager also runs the controllers Pods
    need and a kube-scheduler (``scheduler``) binds them. ``advertise_address``: the address
    the ``kubernetes`` Service's endpoints hold (then kept by the apiserver's lease reconciler;
    with loopback, the default, there are none); the apiserver listens on 127.0.0.1 either way.
    """

    _authorization_mode = "RBAC"

    def __init__(
        self,
        name: str,
        workdir: Path,
        binaries: Path,
        etcd_url: str,
        etcd_prefix: str,
        controllers: tuple[str, ...],
        extra_args: tuple[str, ...] = (),
        kcm_args: tuple[str, ...] = (),
        pods: PodLifecycle | None = None,
        advertise_address: str = "127.0.0.1",
        serving_addresses: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.dir = workdir
        self._binaries = binaries
        self._etcd_url = etcd_url
        self._etcd_prefix = etcd_prefix
        if pods is not None:
            controllers = tuple(sorted({*controllers, *_POD_LIFECYCLE_CONTROLLERS}))
            kcm_args = (*kcm_args, *pods.kcm_args())
        self._controllers = controllers
        self._extra_args = extra_args
        self._kcm_args = kcm_args
        self.pods = pods
        self._advertise_address = advertise_address
        loopback = advertise_address == "127.0.0.1"
        addresses = (*(() if loopback else (advertise_address,)), *serving_addresses)
        self.pki = _Pki(workdir / "pki", name, addresses)
        self._port_file = workdir / "port"
        self.port = remembered_port(self._port_file)
        self.apiserver: Process | None = None
        self.kcm: Process | None = None
        self.scheduler: Process | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    def kubeconfig_dict(self, server: str | None = None) -> dict[str, Any]:
        """The admin kubeconfig as a dict (what a ``<cluster>-kubeconfig`` Secret holds);
        ``server``: another URL of this apiserver (default ``url``)."""
        return self.pki.kubeconfig(server or self.url, f"{self.name}-admin", self.pki.admin)

    def kubeconfig_yaml(self, server: str | None = None) -> str:
        return yaml.safe_dump(self.kubeconfig_dict(server), sort_keys=False)

    def _apiserver_argv(self) -> list[str]:
        p = self.pki
        return [
            str(self._binaries / "kube-apiserver"),
            f"--etcd-servers={self._etcd_url}",
            f"--etcd-prefix={self._etcd_prefix}",
            "--bind-address=127.0.0.1",
            f"--advertise-address={self._advertise_address}",
            f"--secure-port={self.port}",
            f"--cert-dir={p.dir}",
            f"--tls-cert-file={p.serving_crt}",
            f"--tls-private-key-file={p.serving_key}",
            f"--client-ca-file={p.ca_crt}",
            f"--authorization-mode={self._authorization_mode}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p.sa_pub}",
            f"--service-account-signing-key-file={p.sa_key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--profiling=false",
            "--endpoint-reconciler-type="
            + ("none" if self._advertise_address == "127.0.0.1" else "lease"),
            *self._extra_args,
        ]

    def _kcm_argv(self) -> list[str]:
        kubeconfig = self.dir / "controller-manager.kubeconfig"
        kcm_config = self.pki.kubeconfig(self.url, "kube-controller-manager", self.pki.kcm)
        kubeconfig.write_text(yaml.safe_dump(kcm_config))
        kubeconfig.chmod(0o600)
        return [
            str(self._binaries / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            f"--controllers={','.join(self._controllers)}",
            f"--service-account-private-key-file={self.pki.sa_key}",
            f"--root-ca-file={self.pki.ca_crt}",
            "--use-service-account-credentials=false",
            "--concurrent-gc-syncs=5",
            *self._kcm_args,
        ]

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"{self.url}/readyz", context=self.pki.ssl_context(), timeout=2
            ) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def start_apiserver(self) -> None:
        """Start kube-apiserver, on a new free port unless it already has one; wait for /readyz."""
        keep_port = self.port != 0
        for attempt in range(_PORT_ATTEMPTS):
            if not keep_port:
                self.port = free_port()
            proc = Process(f"{self.name}-kube-apiserver", self._apiserver_argv(), self.dir)
            proc.start()
            try:
                wait_until(self._ready, _START_TIMEOUT, f"{self.name} kube-apiserver", proc)
            except ProcessFailed as exc:
                proc.stop()
                if "address already in use" in str(exc) and attempt + 1 < _PORT_ATTEMPTS:
                    keep_port = False
                    continue
                raise
            self.apiserver = proc
            self._port_file.write_text(str(self.port))
            self.kubeconfig.write_text(self.kubeconfig_yaml())
            self.kubeconfig.chmod(0o600)
            return

    def _scheduler_argv(self, binary: Path) -> list[str]:
        """kube-scheduler under its own identity (in system:masters, as the controller-manager
        is), no leader election, its health endpoint on a free loopback port."""
        identity = pki.issue(self.pki.ca, "system:kube-scheduler", organization="system:masters")
        kubeconfig = self.dir / "scheduler.kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(self.pki.kubeconfig(self.url, "kube-scheduler", identity))
        )
        kubeconfig.chmod(0o600)
        return [
            str(binary),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
        ]

    def start(self) -> None:
        """Start the apiserver and controller-manager, and the scheduler when Pods live here.

        ``BinariesNotFound`` when Pods should but no kube-scheduler was built."""
        scheduler = None
        if self.pods is not None:
            scheduler = self._binaries / "kube-scheduler"
            if not os.access(scheduler, os.X_OK):
                raise BinariesNotFound(
                    f"no kube-scheduler in {self._binaries}: run hack/controlplane/build.sh "
                    "(it builds one), or add one to KUBEBUILDER_ASSETS"
                )
        self.start_apiserver()
        self.kcm = Process(f"{self.name}-kube-controller-manager", self._kcm_argv(), self.dir)
        self.kcm.start()
        if scheduler is not None:
            self.scheduler = Process(
                f"{self.name}-kube-scheduler", self._scheduler_argv(scheduler), self.dir
            )
            self.scheduler.start()

    def stop_apiserver(self) -> None:
        if self.apiserver is not None:
            self.apiserver.stop()

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port (watches break).

        A controller-manager survives an apiserver restart once it runs, but one still starting
        exits when the apiserver refuses it ("error building controller context"). On a real
        node the kubelet restarts that static pod; here this does, so garbage collection never
        silently stops for the tests that follow.
        """
        self.stop_apiserver()
        self.start_apiserver()
        if self.kcm is not None and not self.kcm.running():
            self.kcm.start()

    def stop(self) -> None:
        stop_all(list(self.processes()))

    def processes(self) -> Iterator[Process]:
        yield from (p for p in (self.apiserver, self.kcm, self.scheduler) if p is not None)


class WorkloadCluster(_ApiServerCluster):
    """A workload cluster's API: nodes join it with bootstrap tokens. With ``pods`` (a
    ``PodLifecycle``), its controller-manager runs the controllers Pods need and a
    kube-scheduler (``scheduler``) binds them."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        binaries: Path,
        etcd_url: str,
        etcd_prefix: str,
        pods: PodLifecycle | None = None,
        node_auth: NodeAuth | None = None,
        apiserver_args: tuple[str, ...] = (),
        serving_addresses: tuple[str, ...] = (),
    ) -> None:
        controllers: tuple[str, ...] = _WORKLOAD_CONTROLLERS
        if node_auth is not None:
            controllers = tuple(sorted({*controllers, *_NODE_AUTH_CONTROLLERS}))
        super().__init__(
            name,
            workdir,
            binaries,
            etcd_url,
            etcd_prefix,
            controllers,
            ("--enable-bootstrap-token-auth", *apiserver_args),
            pods=pods,
            serving_addresses=serving_addresses,
        )
        self.node_auth = node_auth
        self.pod_url: str | None = None
        """Where Pods on the management cluster's real node reach this apiserver (the node
        forwards its port), or None without one."""
        if node_auth is not None:
            self._authorization_mode = "Node,RBAC"
            self._extra_args += ("--enable-admission-plugins=NodeRestriction",)
            self._kcm_args += (
                f"--cluster-signing-cert-file={self.pki.ca_crt}",
                f"--cluster-signing-key-file={self.pki.ca_key}",
            )
            if node_auth.audit:
                policy = workdir / "audit-policy.yaml"
                policy.write_text(yaml.safe_dump(_NODE_AUDIT_POLICY))
                self._extra_args += (
                    f"--audit-policy-file={policy}",
                    f"--audit-log-path={self.audit_log}",
                )

    @property
    def audit_log(self) -> Path:
        """Where the apiserver logs kubelet-like writes (JSON lines) when ``NodeAuth.audit``."""
        return self.dir / "audit.log"

    def _bind_node_bootstrap(self) -> None:
        """Create kubeadm's ClusterRoleBindings for bootstrap tokens and nodes (idempotent)."""
        for binding, role, group in _KUBEADM_NODE_BINDINGS:
            body = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": binding},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}
                ],
            }
            request = urllib.request.Request(
                f"{self.url}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            try:
                with urllib.request.urlopen(request, context=self.pki.ssl_context(), timeout=10):
                    pass
            except urllib.error.HTTPError as exc:
                if exc.code != 409:  # already there: a restarted cluster
                    raise

    def start(self) -> None:
        """Start the apiserver and controller-manager (and the scheduler when Pods live here);
        with ``NodeAuth``, bind kubeadm's roles for joining nodes."""
        super().start()
        if self.node_auth is not None:
            self._bind_node_bootstrap()

    @property
    def ca_cert_pem(self) -> bytes:
        return self.pki.ca.cert_pem

    @property
    def ca_key_pem(self) -> bytes:
        return self.pki.ca.key_pem


class ControlPlane:
    """A local management cluster, and the workload clusters started from it.

    >>> with ControlPlane() as cp:
    ...     workload = cp.start_workload("cluster-a")
    ...     print(cp.kubeconfig, workload.kubeconfig)

    ``management_args``: extra kube-apiserver flags for the management cluster, for example
    ``("--max-requests-inflight=4",)`` to make it push back with 429s under load.

    ``node``: a real node for the management cluster (kubelet, containerd, kube-proxy; needs
    root, see ``RealNode``), and what Pods need to live there: a kube-scheduler, the
    controllers of ``PodLifecycle``, the Node authorizer. ``NodeUnavailable`` says in one line
    what this machine lacks for one:

    >>> with ControlPlane(node=RealNode()) as cp:
    ...     print(cp.node.spec.name, cp.node.image)  # Ready soon after
    """

    def __init__(
        self,
        workdir: Path | None = None,
        *,
        binaries: Path | None = None,
        fsync: bool = False,
        management_args: tuple[str, ...] = (),
        node: RealNode | None = None,
    ) -> None:
        self._own_workdir = workdir is None
        self.dir = Path(tempfile.mkdtemp(prefix="machinepool-")) if workdir is None else workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self._binaries = binaries
        self._fsync = fsync
        self._management_args = management_args
        self._node_spec = node
        self._node: Node | None = None
        self.etcd: Process | None = None
        self.etcd_port = remembered_port(self.dir / "etcd-port")
        self._management: _ApiServerCluster | None = None
        self.workloads: dict[str, WorkloadCluster] = {}

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        if self._management is not None:
            raise RuntimeError("control plane already started")
        binaries = self._binaries or find_binaries()
        self._binaries = binaries
        try:
            if self._node_spec is not None:
                node = Node(self._node_spec, self.dir / "management" / "node", binaries)
                node.prepare()  # NodeUnavailable before it creates anything
                self._node = node
            self._start_etcd()
            self._management = self._management_cluster(binaries)
            self._management.start()
            if self._node is not None:
                p = self._management.pki
                self._node.start(self._management.port, p.ca, p.ca_crt, p.kubeconfig)
        except BaseException:
            self.stop()
            raise

    def _management_cluster(self, binaries: Path) -> _ApiServerCluster:
        name, workdir = "management", self.dir / "management"
        if self._node is None:
            return _ApiServerCluster(
                name,
                workdir,
                binaries,
                self.etcd_url,
                "/registry",
                _MANAGEMENT_CONTROLLERS,
                self._management_args,
            )
        # A real node's kubelet is confined to its own Node and Pods, as in a kubeadm cluster;
        # the apiserver reaches it with the admin identity for logs and exec.
        cluster = _ApiServerCluster(
            name,
            workdir,
            binaries,
            self.etcd_url,
            "/registry",
            (*_MANAGEMENT_CONTROLLERS, *_REAL_NODE_CONTROLLERS),
            pods=PodLifecycle(),
            advertise_address=self._node.host_address,
        )
        cluster._authorization_mode = "Node,RBAC"
        crt, key = cluster.pki.admin.write(cluster.pki.dir, "admin")
        cluster._extra_args = (
            "--enable-admission-plugins=NodeRestriction",
            f"--kubelet-client-certificate={crt}",
            f"--kubelet-client-key={key}",
            "--kubelet-preferred-address-types=InternalIP",  # its Hostname resolves nowhere
            # Webhooks at their Pods (routed to the node), not at ClusterIPs, which only the
            # node's kube-proxy translates.
            *(("--enable-aggregator-routing=true",) if self._node.spec.routed_pods else ()),
            *self._management_args,
        )
        return cluster

    def stop(self) -> None:
        """Stop every process (the apiservers and controller-managers together, then etcd);
        the work directory is removed if this object created it."""
        if self._node is not None:
            self._node.stop()
            self._node = None
        clusters: list[_ApiServerCluster] = [*self.workloads.values()]
        if self._management is not None:
            clusters.append(self._management)
        stop_all(p for cluster in clusters for p in cluster.processes())
        self.workloads.clear()
        self._management = None
        if self.etcd is not None:
            self.etcd.stop()
            self.etcd = None
        if self._own_workdir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- etcd ---------------------------------------------------------------------------

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    def _etcd_argv(self, peer_port: int) -> list[str]:
        assert self._binaries is not None
        peer = f"http://127.0.0.1:{peer_port}"
        argv = [
            str(self._binaries / "etcd"),
            f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--log-level=warn",
            "--quota-backend-bytes=8589934592",
        ]
        if not self._fsync:
            argv.append("--unsafe-no-fsync")
        return argv

    def _etcd_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _start_etcd(self) -> None:
        keep_port = self.etcd_port != 0
        for attempt in range(_PORT_ATTEMPTS):
            if not keep_port:
                self.etcd_port = free_port()
            proc = Process("etcd", self._etcd_argv(free_port()), self.dir)
            proc.start()
            try:
                wait_until(self._etcd_healthy, _START_TIMEOUT, "etcd", proc)
            except ProcessFailed as exc:
                proc.stop()
                if "address already in use" in str(exc) and attempt + 1 < _PORT_ATTEMPTS:
                    keep_port = False
                    continue
                raise
            self.etcd = proc
            (self.dir / "etcd-port").write_text(str(self.etcd_port))
            return

    def restart_etcd(self) -> None:
        """Stop etcd and start it again on the same port with the same data."""
        if self.etcd is not None:
            self.etcd.stop()
        self._start_etcd()

    # -- clusters -----------------------------------------------------------------------

    @property
    def management(self) -> _ApiServerCluster:
        if self._management is None:
            raise RuntimeError("control plane not started")
        return self._management

    @property
    def node(self) -> Node:
        """The management cluster's real node (``ControlPlane(node=RealNode())``)."""
        if self._node is None:
            raise RuntimeError("no real node: start the control plane with node=RealNode()")
        return self._node

    @property
    def kubeconfig(self) -> Path:
        """The management cluster's admin kubeconfig."""
        return self.management.kubeconfig

    @property
    def url(self) -> str:
        return self.management.url

    def kubeconfig_dict(self) -> dict[str, Any]:
        return self.management.kubeconfig_dict()

    def restart_apiserver(self) -> None:
        self.management.restart_apiserver()

    def start_workload(
        self,
        name: str,
        *,
        pods: PodLifecycle | None = None,
        node_auth: NodeAuth | None = None,
        apiserver_args: tuple[str, ...] = (),
    ) -> WorkloadCluster:
        """Start a workload cluster's kube-apiserver (and controller-manager) on shared etcd.

        ``pods``: also the controllers and the scheduler Pods need, for a cluster whose Pods
        are scheduled, replaced and evicted as in a user's (see ``PodLifecycle``):

        >>> cp.start_workload("w", pods=PodLifecycle(node_monitor_grace_seconds=10))

        ``node_auth``: kubelets authenticate and are confined as in a kubeadm cluster (the
        Node authorizer, NodeRestriction, CSR approval and signing; see ``NodeAuth``).

        ``apiserver_args``: extra kube-apiserver flags, for example an authentication webhook
        (``--authentication-token-webhook-config-file``) as a managed Kubernetes service runs.
        """
        if name in self.workloads:
            raise ValueError(f"workload cluster {name!r} already started")
        assert self._binaries is not None
        workload = WorkloadCluster(
            name,
            self.dir / "workload" / name,
            self._binaries,
            self.etcd_url,
            f"/workload/{name}",
            pods,
            node_auth,
            apiserver_args,
            serving_addresses=(self._node.host_address,) if self._node is not None else (),
        )
        try:
            workload.start()
            if self._node is not None:  # its Pods reach this apiserver too
                self._node.forward(workload.port)
                workload.pod_url = f"https://{self._node.host_address}:{workload.port}"
        except BaseException:
            workload.stop()
            raise
        self.workloads[name] = workload
        return workload

    def stop_workload(self, name: str) -> None:
        workload = self.workloads.pop(name, None)
        if workload is not None:
            workload.stop()
            if self._node is not None and workload.pod_url is not None:
                self._node.forward(workload.port, remove=True)

    def processes(self) -> list[Process]:
        """Every process this control plane runs right now."""
        procs = [self.etcd] if self.etcd else []
        if self._management is not None:
            procs += list(self._management.processes())
        if self._node is not None:
            procs += list(self._node.processes())
        for workload in self.workloads.values():
            procs += list(workload.processes())
        return procs
