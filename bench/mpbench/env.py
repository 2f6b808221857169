"""The benchmark's environment: a local control plane with audit logs, identities and CRDs.

``BenchEnv`` starts a management cluster and one workload cluster (``machinepool.controlplane``),
optionally restarts both kube-apiservers with an audit log (ControlPlane has no parameter for
extra management-apiserver flags yet, so the flags are set on its apiserver object and the
apiserver is restarted on the same port), issues one client certificate per process under test
so the management audit log tells them apart by username, installs the CRDs (ours, or upstream
Cluster API's core CRDs in place of ours for the ``cluster.x-k8s.io`` kinds) and registers the
workload cluster as a Cluster. Called by ``bench_machinepool.py``; one env per measured run.
"""

from __future__ import annotations

import ssl
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from machinepool.api.crdgen import crd_manifests
from machinepool.controlplane import ControlPlane, WorkloadCluster, upstream
from machinepool.controlplane.register import register_workload_cluster
from machinepool.runtime import CRDS, NAMESPACES, Client, pki, wait_established
from mpbench.stats import AUDIT_POLICY, AuditLog, read_proc

NAMESPACE = "bench"
CLUSTER = "bench"
CORE_GROUP = "cluster.x-k8s.io"
DRIVER_AGENT = "machinepool-bench"


def crds_for(core: str) -> list[dict[str, Any]]:
    """The CRDs a run installs: ours, or upstream's core kinds plus our providers' kinds."""
    ours = crd_manifests()
    if core == "ours":
        return ours
    return upstream.crds() + [crd for crd in ours if crd["spec"]["group"] != CORE_GROUP]


class BenchEnv:
    """One management + one workload cluster, set up for a measured run.

    >>> env = BenchEnv(workdir, audit=True); env.start()
    >>> client = await env.client("bench-driver"); await env.install(client, "ours")
    >>> ...; env.stop()
    """

    def __init__(self, workdir: Path, *, audit: bool, binaries: Path | None = None) -> None:
        self.dir = workdir
        self.audit = audit
        self.cp = ControlPlane(workdir / "cp", binaries=binaries)
        self.workload: WorkloadCluster | None = None
        self.audit_logs: dict[str, AuditLog] = {}

    # -- lifecycle (blocking; call from the main thread, children die with it) -------------

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cp.start()
        self.workload = self.cp.start_workload(CLUSTER)
        if self.audit:
            policy = self.dir / "audit-policy.yaml"
            policy.write_text(AUDIT_POLICY)
            self._enable_audit("management", self.cp.management, policy)
            self._enable_audit("workload", self.workload, policy)

    def _enable_audit(self, server: str, cluster: Any, policy: Path) -> None:
        log = self.dir / f"audit-{server}.log"
        # Workaround: ControlPlane takes no extra apiserver flags; see the module docstring.
        cluster._extra_args = (
            *cluster._extra_args,
            f"--audit-policy-file={policy}",
            f"--audit-log-path={log}",
            "--audit-log-maxsize=1000000",  # MB: never rotate under our incremental reader
            "--audit-log-mode=blocking",
        )
        cluster.restart_apiserver()
        self.audit_logs[server] = AuditLog(log)

    def stop(self) -> None:
        self.cp.stop()

    # -- identities and clients --------------------------------------------------------

    def kubeconfig_for(self, user: str) -> Path:
        """A management kubeconfig for ``user`` (system:masters), so audit tells users apart."""
        mgmt = self.cp.management
        path = self.dir / f"{user}.kubeconfig"
        if not path.exists():
            cert = pki.issue(mgmt.pki.ca, user, organization="system:masters")
            config = mgmt.pki.kubeconfig(mgmt.url, user, cert)
            path.write_text(yaml.safe_dump(config))
            path.chmod(0o600)
        return path

    async def client(self, user: str) -> Client:
        return await Client.from_kubeconfig(self.kubeconfig_for(user), user_agent=DRIVER_AGENT)

    async def workload_client(self) -> Client:
        assert self.workload is not None
        return await Client.from_kubeconfig(self.workload.kubeconfig, user_agent=DRIVER_AGENT)

    # -- API objects -------------------------------------------------------------------

    async def install(self, client: Client, core: str) -> None:
        """Install the CRDs for ``core`` ("ours" or "upstream"), the namespace and the Cluster."""
        names = []
        for crd in crds_for(core):
            await client.apply(CRDS, crd, field_manager=DRIVER_AGENT, force=True)
            names.append(crd["metadata"]["name"])
        for name in names:
            await wait_established(client, name)
        await client.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
        assert self.workload is not None
        await register_workload_cluster(client, CLUSTER, NAMESPACE, self.workload)

    # -- apiserver metrics -------------------------------------------------------------

    def controlplane_cpu(self) -> dict[str, float]:
        """CPU seconds so far of the management and workload kube-apiservers and of etcd.

        The management apiserver is where a scale step's time goes on this machine (every
        write of a custom resource is decoded, validated, encoded and sent to each watcher
        there), so each step reports what these processes spent beside the core's and infra's.
        """
        assert self.workload is not None
        found = {}
        for key, proc in (
            ("mgmt_apiserver", self.cp.management.apiserver),
            ("workload_apiserver", self.workload.apiserver),
            ("etcd", self.cp.etcd),
        ):
            pid = proc.pid if proc is not None else None
            found[key] = read_proc(pid).cpu_seconds if pid else 0.0
        return found

    def apiserver_metrics(self, server: str) -> str:
        """The text of a kube-apiserver's /metrics (``server``: management or workload)."""
        cluster = self.cp.management if server == "management" else self.workload
        assert cluster is not None
        ctx: ssl.SSLContext = cluster.pki.ssl_context()
        with urllib.request.urlopen(f"{cluster.url}/metrics", context=ctx, timeout=30) as resp:
            return str(resp.read().decode())
