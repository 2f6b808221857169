"""Security: least-privilege RBAC, the controllers running under exactly those rights,
webhooks only over TLS, and no credential in any log or Event.

The RBAC under test is the one shipped in ``deploy/config/*/rbac.yaml``. It is applied to the
management cluster, checked with ``kubectl auth can-i`` as each manager's ServiceAccount, and
then each manager runs as its own process with a token of its ServiceAccount and nothing
else. The local control plane runs no clusterrole-aggregation controller, so the test folds
the ``aggregate-to-manager`` roles into the aggregated role itself, as that controller would.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from tests.reliability.harness import Env, check_converged, scan_logs, secret_needles
from tests.support.builders import VERSION, create_pool
from tests.support.pools import scale_pool
from tests.support.rbac import wait_aggregated
from tests.support.resources import CLUSTER_ROLE_BINDINGS, MACHINE_POOLS

from machinepool.controlplane import ControlPlane
from machinepool.controlplane.process import free_port
from machinepool.runtime import (
    METRICS_READER_ROLE,
    NAMESPACES,
    SECRETS,
    SERVICE_ACCOUNTS,
    AlreadyExists,
    Client,
    NotFound,
    Obj,
    Resource,
)

REPO = Path(__file__).resolve().parents[2]
KUBECTL = Path("/root/.cache/machinepool/controlplane/v1.34.4/kubectl")
RBAC_FILES = {
    "core": REPO / "deploy/config/core/base/rbac.yaml",
    "bootstrap": REPO / "deploy/config/bootstrap/rbac.yaml",
    "sim": REPO / "deploy/config/sim/rbac.yaml",
    "aws": REPO / "deploy/config/aws/rbac.yaml",
}
EXTRA_RBAC_FILES = {
    # The standalone core's MachineHealthCheck rights (a kustomize component of config/core).
    "core": (REPO / "deploy/config/core/healthcheck/rbac.yaml",),
}
AGGREGATE_LABEL = "cluster.x-k8s.io/aggregate-to-manager"
CORE_RESOURCES = ("secrets", "configmaps", "pods", "nodes", "serviceaccounts", "namespaces")


def _docs(component: str) -> list[Obj]:
    files = (RBAC_FILES[component], *EXTRA_RBAC_FILES.get(component, ()))
    return [d for path in files for d in yaml.safe_load_all(path.read_text()) if d]


def _account(component: str) -> str:
    sa = next(d for d in _docs(component) if d["kind"] == "ServiceAccount")
    return f"system:serviceaccount:{sa['metadata']['namespace']}:{sa['metadata']['name']}"


# -- static: the manifests themselves ------------------------------------------------------


@pytest.mark.parametrize("component", sorted(RBAC_FILES))
def test_rbac_has_no_wildcards_and_no_cluster_wide_escalation(component: str) -> None:
    for doc in _docs(component):
        for rule in doc.get("rules") or []:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in (rule.get(key) or []), f"{doc['metadata']['name']}: {rule}"
            if "" in (rule.get("apiGroups") or []):
                assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
            assert "rbac.authorization.k8s.io" not in (rule.get("apiGroups") or []), rule


# -- live: the rights as the apiserver sees them -------------------------------------------


async def _apply_rbac(client: Client) -> None:
    """Apply every rbac.yaml (and its namespaces); the aggregation controller folds them in."""
    roles: list[Obj] = []
    for component in RBAC_FILES:
        for doc in _docs(component):
            namespace = doc["metadata"].get("namespace")
            if namespace:
                with contextlib.suppress(AlreadyExists):
                    await client.create(NAMESPACES, {"metadata": {"name": namespace}})
            await client.apply(await _resource(client, doc), doc, field_manager="reliability-tests")
            if doc["kind"] == "ClusterRole":
                roles.append(doc)
    await wait_aggregated(
        client, [r["metadata"]["name"] for r in roles if r.get("aggregationRule")]
    )


async def _resource(client: Client, doc: Obj) -> Resource:
    # Client.resource() cannot resolve core ("v1") kinds yet: it looks them up under "/v1".
    if doc["apiVersion"] == "v1":
        return {"ServiceAccount": SERVICE_ACCOUNTS, "Namespace": NAMESPACES}[doc["kind"]]
    return await client.resource(doc["apiVersion"], doc["kind"])


def _can_i(kubeconfig: Path, account: str, *args: str) -> bool:
    done = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(kubeconfig), "auth", "can-i", *args, "--as", account],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return done.stdout.strip() == "yes"


Checks = dict[str, list[tuple[str, ...]]]
MUST: Checks = {
    "core": [
        ("get", "secrets", "-n", "default"),
        ("patch", "machinepools.cluster.x-k8s.io", "-n", "default"),
        ("patch", "machinepools.cluster.x-k8s.io", "--subresource", "status", "-n", "default"),
        ("create", "machines.cluster.x-k8s.io", "-n", "default"),
        ("delete", "simmachinepools.infrastructure.cluster.x-k8s.io", "-n", "default"),
        ("delete", "kubeadmconfigs.bootstrap.cluster.x-k8s.io", "-n", "default"),
        ("watch", "machinehealthchecks.cluster.x-k8s.io", "-n", "default"),
        (
            "patch",
            "machinehealthchecks.cluster.x-k8s.io",
            "--subresource",
            "status",
            "-n",
            "default",
        ),
    ],
    "bootstrap": [
        ("create", "secrets", "-n", "default"),
        ("patch", "kubeadmconfigs.bootstrap.cluster.x-k8s.io", "-n", "default"),
    ],
    "sim": [
        ("list", "secrets", "-n", "default"),
        ("patch", "simmachinepools.infrastructure.cluster.x-k8s.io", "-n", "default"),
    ],
    "aws": [("get", "secrets", "-n", "default")],
}
MUST_NOT: Checks = {
    "core": [
        ("list", "secrets", "-A"),
        ("watch", "secrets", "-n", "default"),
        ("create", "secrets", "-n", "default"),
        ("delete", "secrets", "-n", "default"),
        ("create", "machinepools.cluster.x-k8s.io", "-n", "default"),
        ("delete", "machinepools.cluster.x-k8s.io", "-n", "default"),
        ("patch", "clusters.cluster.x-k8s.io", "-n", "default"),
        ("create", "machinehealthchecks.cluster.x-k8s.io", "-n", "default"),
        ("delete", "machinehealthchecks.cluster.x-k8s.io", "-n", "default"),
    ],
    "bootstrap": [
        ("list", "secrets", "-n", "default"),
        ("watch", "secrets", "-A"),
        ("patch", "machinepools.cluster.x-k8s.io", "-n", "default"),
    ],
    "sim": [
        ("patch", "clusters.cluster.x-k8s.io", "-n", "default"),
        ("delete", "machinepools.cluster.x-k8s.io", "-n", "default"),
        ("create", "configmaps", "-n", "default"),
    ],
    "aws": [("list", "secrets", "-A"), ("create", "secrets", "-n", "default")],
}
EVERYONE_MUST_NOT: list[tuple[str, ...]] = [
    ("*", "*"),
    ("create", "pods", "-n", "default"),
    ("get", "nodes"),
    ("delete", "nodes"),
    ("create", "clusterrolebindings"),
    ("escalate", "clusterroles"),
    ("impersonate", "serviceaccounts"),
    ("create", "serviceaccounts/token", "-n", "kube-system"),
    ("delete", "namespaces"),
    ("update", "customresourcedefinitions.apiextensions.k8s.io"),
]


async def test_rbac_least_privilege_by_kubectl_auth_can_i(
    client: Client, control_plane: ControlPlane, crds: list[str]
) -> None:
    _ = crds
    await _apply_rbac(client)
    problems = []
    for component in RBAC_FILES:
        account = _account(component)
        for args in MUST[component]:
            if not await asyncio.to_thread(_can_i, control_plane.kubeconfig, account, *args):
                problems.append(f"{component} lacks {' '.join(args)}")
        for args in MUST_NOT[component] + EVERYONE_MUST_NOT:
            if await asyncio.to_thread(_can_i, control_plane.kubeconfig, account, *args):
                problems.append(f"{component} may {' '.join(args)}")
        listing = await asyncio.to_thread(
            subprocess.run,
            [str(KUBECTL), "--kubeconfig", str(control_plane.kubeconfig), "auth", "can-i",
             "--list", "-n", "default", "--as", account],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        for line in listing.stdout.splitlines()[1:]:
            resource = line.split()[0] if line.split() else ""
            if resource in CORE_RESOURCES and "[*]" in line:
                problems.append(f"{component} has a wildcard on {resource}: {line}")
            if resource in ("*", "*.*"):
                problems.append(f"{component} has a wildcard resource: {line}")
    assert problems == []


async def _token_kubeconfig(
    client: Client, control_plane: ControlPlane, component: str, path: Path
) -> tuple[Path, str]:
    namespace, name = _account(component).split(":")[2:]
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }
    answer = await client.request(
        "POST", SERVICE_ACCOUNTS.path(namespace, name) + "/token", body=request
    )
    token = str(answer["status"]["token"])
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "management",
                "cluster": {
                    "server": control_plane.url,
                    "certificate-authority": str(control_plane.management.pki.ca_crt),
                },
            }
        ],
        "users": [{"name": component, "user": {"token": token}}],
        "contexts": [{"name": component, "context": {"cluster": "management", "user": component}}],
        "current-context": component,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path, token


async def test_controllers_run_under_exactly_the_shipped_rights(
    env: Env, control_plane: ControlPlane, tmp_path: Path
) -> None:
    await _apply_rbac(env.client)
    tokens = []
    procs = []
    webhook_port = free_port()
    for component in ("core", "bootstrap", "sim"):
        kubeconfig, token = await _token_kubeconfig(
            env.client, control_plane, component, tmp_path / f"{component}.kubeconfig"
        )
        tokens.append(token)
        namespace = _account(component).split(":")[2]
        options: dict[str, Any] = {
            "kubeconfig": kubeconfig,
            # As deployed: leader election in the manager's own namespace, JSON logs.
            "leader_elect": True,
            "lease_name": f"machinepool-{component}-controller",
            "extra_args": ("--leader-election-namespace", namespace, "--log-format", "json"),
        }
        if component == "core":
            options["webhook_port"] = webhook_port
        # As deployed (deploy/config/sim/manager.yaml): the node simulator runs with the provider.
        components = "sim,kubelet" if component == "sim" else component
        procs.append(env.spawn(f"rbac-{component}", components, **options))
    for proc in procs:
        await proc.wait_ready()

    world = env.world
    await create_pool(env.client, env.namespace, "least", replicas=2)
    await world.until(lambda: world.running("least", 2, VERSION), "2 Ready under shipped RBAC")
    await scale_pool(env.client, env.namespace, "least", 1)
    await world.until(
        lambda: (
            world.running("least", 1, VERSION) and not check_converged(world, "least", 1, VERSION)
        ),
        "scaled to 1 under shipped RBAC",
    )
    await env.client.delete(MACHINE_POOLS, "least", env.namespace)
    await world.until(
        lambda: (
            world.get("machinepools", "least") is None
            and not world.nodes()
            and not world.objects("machines")
            and not world.objects("simmachinepools")
        ),
        "pool deleted under shipped RBAC",
    )

    await _assert_webhooks_tls_only(webhook_port)
    forbidden = [
        line
        for proc in procs
        for line in proc.log.read_text(errors="replace").splitlines()
        if "forbidden" in line.lower()
    ]
    assert forbidden == []
    listed = await env.client.list(SECRETS, env.namespace)
    needles = secret_needles(
        [s for s in listed.items if s["metadata"]["name"].endswith("-kubeconfig")], tokens
    )
    assert scan_logs((p.log for p in procs), needles) == []
    assert await env.secret_findings() == []


async def _assert_webhooks_tls_only(port: int) -> None:
    """Plain HTTP to the webhook port gets no answer; HTTPS (TLS 1.2+) does."""
    async with aiohttp.ClientSession() as http:
        status: int | None = None
        try:
            async with http.get(
                f"http://127.0.0.1:{port}/healthz", timeout=aiohttp.ClientTimeout(total=10)
            ) as resp:
                status = resp.status
        except (aiohttp.ClientError, TimeoutError):
            status = None
        assert status is None or status >= 400, f"plain HTTP answered {status}"
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        async with http.get(f"https://127.0.0.1:{port}/healthz", ssl=insecure) as resp:
            assert resp.status == 200


# -- secure diagnostics: who may read /metrics ---------------------------------------------


async def _service_account_token(client: Client, namespace: str, name: str) -> str:
    with contextlib.suppress(AlreadyExists):
        await client.create(SERVICE_ACCOUNTS, {"metadata": {"name": name}}, namespace)
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }
    answer = await client.request(
        "POST", SERVICE_ACCOUNTS.path(namespace, name) + "/token", body=request
    )
    return str(answer["status"]["token"])


async def _scrape(port: int, token: str | None) -> tuple[int, str]:
    insecure = ssl.create_default_context()  # the manager's self-signed serving certificate
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"https://127.0.0.1:{port}/metrics", ssl=insecure, headers=headers) as resp,
    ):
        return resp.status, await resp.text()


async def test_metrics_answer_only_tokens_bound_to_the_metrics_reader_role(
    env: Env, control_plane: ControlPlane, tmp_path: Path
) -> None:
    """The core manager as deployed (its own ServiceAccount token, the shipped RBAC, secure
    diagnostics): a token bound to machinepool-metrics-reader scrapes /metrics; a valid token
    without the binding gets 403 naming the role; no token or a forged one gets 401; the
    probes answer the kubelet without credentials; no token reaches the log."""
    await _apply_rbac(env.client)
    kubeconfig, core_token = await _token_kubeconfig(
        env.client, control_plane, "core", tmp_path / "core.kubeconfig"
    )
    namespace = _account("core").split(":")[2]
    core = env.spawn(
        "metrics-core",
        "core",
        kubeconfig=kubeconfig,
        secure_diagnostics=True,
        extra_args=("--leader-election-namespace", namespace, "--log-format", "json"),
    )
    reader = await _service_account_token(env.client, env.namespace, "prometheus")
    stranger = await _service_account_token(env.client, env.namespace, "stranger")
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"metrics-reader-{env.namespace}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": METRICS_READER_ROLE,
        },
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": env.namespace}],
    }
    await env.client.apply(CLUSTER_ROLE_BINDINGS, binding, field_manager="reliability-tests")
    try:
        await core.wait_ready()  # over the plain-HTTP probe port, without a token

        status, body = await _scrape(core.port, reader)
        assert status == 200, body
        assert "controller_runtime_reconcile_total" in body
        assert "workqueue_depth" in body

        status, body = await _scrape(core.port, stranger)
        assert status == 403
        assert METRICS_READER_ROLE in body
        assert f"system:serviceaccount:{env.namespace}:stranger" in body

        for token in (None, "", "not-a-token", stranger[:-4] + "AAAA"):
            status, body = await _scrape(core.port, token)
            assert status == 401, (token is None, body)

        async with aiohttp.ClientSession() as http:
            for path in ("/healthz", "/readyz"):
                async with http.get(f"http://127.0.0.1:{core.health_port}{path}") as resp:
                    assert resp.status == 200
        await _assert_webhooks_tls_only(core.port)  # the diagnostics port speaks only TLS
    finally:
        core.stop()
        with contextlib.suppress(NotFound):
            await env.client.delete(CLUSTER_ROLE_BINDINGS, binding["metadata"]["name"])
    assert scan_logs([core.log], [reader, stranger, core_token]) == []
    assert "forbidden" not in core.log.read_text(errors="replace").lower()
