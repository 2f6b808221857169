"""We install and uninstall beside upstream Cluster API as the operator guide tells it
("Beside upstream Cluster API"), with the real clusterctl or with kubectl's kustomize.

A management cluster that already runs upstream's core provider, installed by ``clusterctl
init`` (its MachinePool gate on, a pool of its own), meets the guide's commands:

1. upstream's core restarted with ``--feature-gates=MachinePool=false`` (upstream's own
   ``clusterctl init`` here installs its core only: nothing below needs its kubeadm
   providers);
2. ``[clusterctl]`` ``deploy/generate.py clusterctl-repo --beside-upstream`` and ``clusterctl
   init --addon machinepool --infrastructure sim`` (the inventory lists our addon beside
   upstream's core, no second core), or ``[kustomize]`` ``kubectl apply --server-side -k
   deploy/config/beside-upstream``; our core takes MachinePool admission over and reconciles
   the pool;
3. ``machinepool upstream hand-back``, then ``clusterctl delete --addon machinepool`` or
   ``kubectl delete -k deploy/config/beside-upstream --ignore-not-found``: every
   ``cluster.x-k8s.io`` CRD spec, every webhook configuration and the pool are as they were
   before our install, and upstream's core (gate on again) reconciles the pool.

Offline stand-ins, each for what a connected cluster has:

- upstream's release comes from a local clusterctl repository rendered from the pinned
  module (``clusterctl_mirror``), where online clusterctl fetches it from GitHub. The guide's
  clusterctl.yaml gets it as its first entry, where clusterctl's built-in entry would be, so
  an entry of ours named ``cluster-api`` would still shadow it (the mistake
  ``--beside-upstream`` avoids: ``clusterctl init --addon`` then fails);
- cert-manager is its API only, declared externally provisioned;
- no kubelet runs, so upstream's core and ours run as processes here (``UpstreamProcess``;
  ours with the command line of the Deployment clusterctl installed), reached by URL where
  a Service and cert-manager's CA injector would route them.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import yaml
from tests.support import eventually
from tests.support.builders import CLUSTER
from tests.support.resources import MACHINE_POOLS
from tests.support.upstream import (
    TEST_MACHINE_POOLS,
    UpstreamProcess,
    cluster_namespace,
    clusterctl_mirror,
    upstream_management,
)

from machinepool.controlplane import upstream
from machinepool.controlplane.process import Process, free_port
from machinepool.runtime import (
    CONFIGMAPS,
    CRDS,
    MUTATING_WEBHOOKS,
    VALIDATING_WEBHOOKS,
    ApiError,
    Client,
    NotFound,
    Obj,
    PatchType,
    Resource,
    self_signed,
)
from machinepool.webhooks import beside

from .harness import (
    NO_VERSION_CHECK,
    REPO,
    VERSION,
    build_clusterctl,
    kubectl,
    load_generator,
    route_webhooks,
    run,
    wait_ready,
)

pytestmark = [pytest.mark.clusterctl, pytest.mark.timeout(600)]

ADDON_NAMESPACE = "machinepool-system"
"""Where clusterctl installs the addon, and so where its core keeps the take-over record."""
ADDON_DEPLOYMENT = "machinepool-controller-manager"
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
OVERLAY = REPO / "deploy" / "config" / "beside-upstream"
NS, POOL = "legacy", "legacy"
UPSTREAM_MANAGER = "capi-manager"
"""The field manager of upstream's core manager's writes (its binary's name)."""


def _as_deployed(deployment: Obj, kubeconfig: Path, local: dict[str, str]) -> list[str]:
    """The addon Deployment's container as the kubelet would start it (the image's entrypoint
    ``machinepool run``, ``$(POD_NAMESPACE)`` expanded), with ``local`` flag values for this
    machine's addresses and certificate folder."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    argv = [sys.executable, "-m", "machinepool", "run", f"--kubeconfig={kubeconfig}"]
    for arg in container["args"]:
        flag, eq, value = arg.partition("=")
        value = local.get(flag, value.replace("$(POD_NAMESPACE)", ADDON_NAMESPACE))
        argv.append(f"{flag}={value}" if eq else flag)
    return argv


def _kubectl_ok(kubeconfig: Path, *args: str) -> str:
    result = kubectl(kubeconfig, *args)
    assert result.returncode == 0, f"kubectl {' '.join(args)}:\n{result.stderr}"
    return result.stdout


def clusterctl(path: Path, *args: str) -> str:
    result = run([str(path), *args], env=NO_VERSION_CHECK)
    assert result.returncode == 0, f"clusterctl {' '.join(args)}:\n{result.stderr}"
    return result.stdout + result.stderr


async def _route_conversions(client: Client, url: str, ca_bundle: bytes) -> None:
    """Every CRD converting through a Service, pointed at ``url`` instead (the Service's and
    cert-manager's CA injector's job in a cluster)."""
    ca = base64.b64encode(ca_bundle).decode()
    for crd in (await client.list(CRDS)).items:
        webhook = (crd["spec"].get("conversion") or {}).get("webhook") or {}
        service = (webhook.get("clientConfig") or {}).get("service")
        if service:
            config = {"service": None, "url": url + service["path"], "caBundle": ca}
            patch = {"spec": {"conversion": {"webhook": {"clientConfig": config}}}}
            await client.patch(CRDS, crd["metadata"]["name"], patch, patch_type=PatchType.MERGE)


async def _shared_state(client: Client) -> Obj:
    """What an uninstall must leave as it found: every webhook configuration's entries, every
    ``cluster.x-k8s.io`` CRD's spec, the MachinePool CRD's CA injection annotation."""
    state: Obj = {
        res.kind: {c["metadata"]["name"]: c["webhooks"] for c in (await client.list(res)).items}
        for res in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS)
    }
    crds = [c for c in (await client.list(CRDS)).items if c["spec"]["group"] == "cluster.x-k8s.io"]
    state["crds"] = {c["metadata"]["name"]: c["spec"] for c in crds}
    state["ca-injection"] = {
        c["metadata"]["name"]: (c["metadata"].get("annotations") or {}).get(
            beside.CA_INJECTION_ANNOTATION
        )
        for c in crds
    }
    return state


def _status_writers(pool: Obj) -> set[str]:
    return {
        f["manager"]
        for f in pool["metadata"].get("managedFields") or []
        if f.get("subresource") == "status"
    }


async def _reconciled(client: Client, generation: int, by: Callable[[set[str]], bool]) -> Obj:
    """The pool once its status observed ``generation`` and its status writers satisfy ``by``."""

    async def done() -> Obj | None:
        try:
            pool = await client.get(MACHINE_POOLS, POOL, NS)
        except ApiError:  # conversion moving to our Service: a moment before it is routed here
            return None
        status = pool.get("status") or {}
        # A reconcile that fails (upstream's, until its cluster cache connects) still
        # records the generation it saw in its conditions.
        observed = {status.get("observedGeneration")} | {
            c.get("observedGeneration") for c in status.get("conditions") or []
        }
        return pool if generation in observed and by(_status_writers(pool)) else None

    try:
        return await eventually(done, within=120)
    except TimeoutError as err:
        pool = await client.get(MACHINE_POOLS, POOL, NS)
        raise AssertionError(f"{err}: {pool['metadata']} {pool.get('status')}") from None


async def _create_pool(client: Client) -> Obj:
    """A pool on a schema-less infra kind no provider runs, bootstrap data given: enough for
    either core to reconcile it (and record so in its status), with nothing to provision."""
    ref = {"apiGroup": TEST_MACHINE_POOLS.group, "kind": "TestMachinePool", "name": POOL}
    infra = {"apiVersion": TEST_MACHINE_POOLS.api_version, "kind": "TestMachinePool"}
    await client.create(TEST_MACHINE_POOLS, {**infra, "metadata": {"name": POOL}, "spec": {}}, NS)
    template = {
        "spec": {
            "clusterName": CLUSTER,
            "bootstrap": {"dataSecretName": f"{POOL}-data"},
            "infrastructureRef": ref,
        }
    }
    body = {
        "apiVersion": MACHINE_POOLS.api_version,
        "kind": "MachinePool",
        "metadata": {"name": POOL, "namespace": NS},
        "spec": {"clusterName": CLUSTER, "replicas": 0, "template": template},
    }
    return await client.create(MACHINE_POOLS, body, NS)


@pytest.mark.parametrize("way", ["clusterctl", "kustomize"])
async def test_installs_and_uninstalls_beside_upstream(
    way: str, tmp_path: Path, cert_manager_api: Callable[[Client], Awaitable[None]]
) -> None:
    """Ours installed and uninstalled either way the guide gives: ``clusterctl init --addon``
    and ``clusterctl delete --addon``, or ``kubectl apply -k`` and ``kubectl delete -k``."""
    binary_clusterctl = await asyncio.to_thread(build_clusterctl)
    async with upstream_management(tmp_path, installed=False) as (cp, client, binary, webhook):
        kubeconfig = f"--kubeconfig={cp.kubeconfig}"
        await cert_manager_api(client)
        # Offline, clusterctl.yaml files name the mirror of upstream's release: alone for
        # upstream's own install, first in the guide's (it stands in for clusterctl's built-in
        # GitHub entry, which a later entry of the same name overrides).
        mirror = clusterctl_mirror(tmp_path / "mirror")
        upstream_config = tmp_path / "upstream-clusterctl.yaml"
        upstream_config.write_text(
            yaml.safe_dump({"providers": mirror, "cert-manager": {"externallyProvisioned": "true"}})
        )
        config = load_generator().clusterctl_repository(
            tmp_path / "repo", external_cert_manager=True, beside_upstream=True
        )
        body = yaml.safe_load(config.read_text())
        body["providers"][:0] = mirror
        config.write_text(yaml.safe_dump(body))
        ctl_config = f"--config={config}"

        # An existing upstream install: its core provider, MachinePool gate on, runs a pool.
        uv = upstream.version()
        clusterctl(
            binary_clusterctl, "init", kubeconfig, f"--config={upstream_config}",
            f"--core=cluster-api:{uv}",
            "--bootstrap=-", "--control-plane=-",
        )  # fmt: skip
        upstream_url = f"https://127.0.0.1:{webhook.port}"
        await route_webhooks(client, upstream_url, webhook.ca_bundle)
        await _route_conversions(client, upstream_url, webhook.ca_bundle)
        workload = await asyncio.to_thread(cp.start_workload, "work")
        procs: list[UpstreamProcess] = []
        ours: Process | None = None

        def upstream_core(machine_pool: bool) -> UpstreamProcess:
            for proc in procs:
                proc.stop()
            proc = UpstreamProcess(
                name="upstream",
                kubeconfig=cp.kubeconfig,
                components="",
                log=tmp_path / "upstream.log",
                binary=binary,
                webhook=webhook,
                machine_pool=machine_pool,
            )
            proc.start()
            procs[:] = [proc]
            return proc

        try:
            await upstream_core(machine_pool=True).wait_ready(timeout=180)
            await cluster_namespace(client, NS, workload)
            created = await _create_pool(client)
            await _reconciled(client, created["metadata"]["generation"], {UPSTREAM_MANAGER}.__le__)

            # The guide: upstream's core restarted with its gate off, then ours as an addon.
            await upstream_core(machine_pool=False).wait_ready(timeout=180)
            before = await _shared_state(client)
            pool_before = await client.get(MACHINE_POOLS, POOL, NS)
            if way == "kustomize":
                _kubectl_ok(cp.kubeconfig, "apply", "--server-side", "-k", str(OVERLAY))
            else:
                out = clusterctl(
                    binary_clusterctl, "init", kubeconfig, ctl_config,
                    f"--addon=machinepool:{VERSION}", f"--infrastructure=sim:{VERSION}",
                )  # fmt: skip
                assert "Skipping installing cert-manager" in out, out
                got = _kubectl_ok(
                    cp.kubeconfig, "get", "providers.clusterctl.cluster.x-k8s.io", "-A", "-ojson"
                )
                inventory = json.loads(got)
                installed = {
                    (p["type"], p["providerName"], p["version"]) for p in inventory["items"]
                }
                assert installed == {
                    ("CoreProvider", "cluster-api", uv),
                    ("AddonProvider", "machinepool", VERSION),
                    ("InfrastructureProvider", "sim", VERSION),
                }
            # Our core with the command line of the Deployment clusterctl installed (the
            # overlay's --beside-upstream among it), its Service stood in for by a URL.
            certs = tmp_path / "ours-certs"
            port = free_port()
            serving = self_signed(certs)
            await route_webhooks(
                client, f"https://127.0.0.1:{port}", serving.ca_bundle, conversion=False
            )
            deployment = await client.get(DEPLOYMENTS, ADDON_DEPLOYMENT, ADDON_NAMESPACE)
            health = free_port()
            local = {
                "--diagnostics-address": f"127.0.0.1:{free_port()}",
                "--health-probe-bind-address": f"127.0.0.1:{health}",
                "--webhook-host": "127.0.0.1",
                "--webhook-port": str(port),
                "--webhook-cert-dir": str(certs),
            }
            ours = Process("ours", _as_deployed(deployment, cp.kubeconfig, local), tmp_path)
            ours.start()
            await asyncio.to_thread(wait_ready, ours, health)
            await eventually(lambda: beside.read_record(client, ADDON_NAMESPACE), within=120)

            async def converts_through_our_service() -> bool:
                crd = await client.get(CRDS, "machinepools.cluster.x-k8s.io")
                config = crd["spec"]["conversion"]["webhook"]["clientConfig"]
                return (config.get("service") or {}).get("name") == beside.WEBHOOK_SERVICE

            await eventually(converts_through_our_service, within=60)
            await _route_conversions(client, f"https://127.0.0.1:{port}", serving.ca_bundle)
            # Our core reconciles the pool upstream left: a status write of its own.
            await _reconciled(
                client,
                pool_before["metadata"]["generation"],
                lambda w: bool(w - {UPSTREAM_MANAGER}),
            )

            # The documented uninstall: hand back, then delete the addon.
            hand_back = await asyncio.to_thread(
                subprocess.run,
                [
                    sys.executable, "-m", "machinepool", "upstream", "hand-back",
                    "--kubeconfig", str(cp.kubeconfig), "-n", ADDON_NAMESPACE,
                ],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            assert hand_back.returncode == 0, hand_back.stdout + hand_back.stderr
            await asyncio.to_thread(ours.stop)
            if way == "kustomize":
                # The hand-back deleted our webhook configurations already.
                _kubectl_ok(cp.kubeconfig, "delete", "-k", str(OVERLAY), "--ignore-not-found")
            else:
                clusterctl(binary_clusterctl, "delete", kubeconfig, "--addon=machinepool")

            assert await _shared_state(client) == before, "CRDs and webhooks as before"
            with pytest.raises(NotFound):
                await client.get(CONFIGMAPS, beside.RECORD_NAME, ADDON_NAMESPACE)
            pool = await client.get(MACHINE_POOLS, POOL, NS)
            assert pool["metadata"]["uid"] == pool_before["metadata"]["uid"]
            assert pool["spec"] == pool_before["spec"]

            # Upstream's core, gate on again, reconciles its pool.
            await upstream_core(machine_pool=True).wait_ready(timeout=180)
            scaled = await client.patch(MACHINE_POOLS, POOL, {"spec": {"replicas": 1}}, NS)
            await _reconciled(client, scaled["metadata"]["generation"], lambda _: True)
        finally:
            for proc in procs:
                proc.stop()
            if ours is not None:
                await asyncio.to_thread(ours.stop)
            await asyncio.to_thread(cp.stop_workload, "work")
