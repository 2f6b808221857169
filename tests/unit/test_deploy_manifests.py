"""What the shipped manifests promise, read from the rendered clusterctl components.

RBAC is least privilege (no wildcards, Secrets only where a component needs them, Leases only
in the manager's namespace) and covers every API resource the component's code names; each
Deployment runs non-root with leader election and probes; the webhook wiring (paths, names,
Service, certificate, CA injection) matches machinepool.webhooks; the Dockerfile builds the
image the manifests name; the cluster templates become valid objects once substituted.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer
import yaml
from tests.support.scripts import deploy_generator

from machinepool.runtime import Resource

REPO = Path(__file__).resolve().parents[2]
RELEASE = REPO / "deploy/release"


gen = deploy_generator()
COMPONENTS = {c.name: c for c in gen.COMPONENTS}


@functools.cache
def objects(component: str) -> list[dict[str, Any]]:
    """The component's rendered objects (parsed once; tests only read them)."""
    text = (RELEASE / COMPONENTS[component].release_file).read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def of_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in of_kind(objs, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def rules(role: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    for rule in role.get("rules") or []:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule.get("verbs", []):
                    yield group, resource, verb


def manager_cluster_rules(component: str) -> set[tuple[str, str, str]]:
    """What the component's manager may do cluster-wide, following aggregation for core."""
    objs = objects(component)
    if component == "core":
        every = [o for c in COMPONENTS for o in of_kind(objects(c), "ClusterRole")]
        aggregated = [
            r
            for r in every
            if (r["metadata"].get("labels") or {}).get("cluster.x-k8s.io/aggregate-to-manager")
            == "true"
        ]
        return {t for r in aggregated for t in rules(r)}
    (binding,) = [b for b in of_kind(objs, "ClusterRoleBinding") if not _metrics_auth(b)]
    role = one(objs, "ClusterRole", binding["roleRef"]["name"])
    return set(rules(role))


def _metrics_auth(obj: dict[str, Any]) -> bool:
    return str(obj["metadata"]["name"]).endswith("-metrics-auth-rolebinding")


ALL = ["core", "bootstrap", "sim", "aws"]
MANAGERS = [*ALL, "beside-upstream"]
"""Every component that runs a manager Deployment (beside-upstream: the core, run beside
upstream Cluster API's core provider)."""


# -- RBAC --------------------------------------------------------------------------------------


@pytest.mark.parametrize("component", ALL)
def test_no_wildcards_anywhere(component: str) -> None:
    for role in of_kind(objects(component), "ClusterRole") + of_kind(objects(component), "Role"):
        for group, resource, verb in rules(role):
            assert "*" not in (group, resource, verb), (role["metadata"]["name"], group, resource)


@pytest.mark.parametrize("component", ALL)
def test_leases_only_in_the_managers_own_namespace(component: str) -> None:
    objs = objects(component)
    assert not any(r == "leases" for _, r, _ in manager_cluster_rules(component))
    deployment = one(objs, "Deployment")
    namespace = deployment["metadata"]["namespace"]
    role = one(objs, "Role")
    assert role["metadata"]["namespace"] == namespace
    # get/create/update for the Lease; list/watch/delete for the shard Leases (--sharding).
    assert set(rules(role)) == {
        ("coordination.k8s.io", "leases", v)
        for v in ("get", "create", "update", "list", "watch", "delete")
    }
    binding = one(objs, "RoleBinding")
    assert binding["metadata"]["namespace"] == namespace
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]


SECRET_VERBS = {
    "core": {"get"},
    "bootstrap": {"get", "create", "patch", "delete"},
    "sim": {"get", "list", "watch", "create", "patch", "delete"},
    "aws": {"get"},
}


@pytest.mark.parametrize("component", ALL)
def test_secrets_only_where_needed(component: str) -> None:
    verbs = {v for g, r, v in manager_cluster_rules(component) if (g, r) == ("", "secrets")}
    assert verbs == SECRET_VERBS[component]


@pytest.mark.parametrize("component", ALL)
def test_events_are_recorded_with_events_k8s_io(component: str) -> None:
    granted = manager_cluster_rules(component)
    assert {("events.k8s.io", "events", "create"), ("events.k8s.io", "events", "patch")} <= granted


# Resources the code names that live in workload clusters, reached with each Cluster's
# kubeconfig credentials rather than the manager's ServiceAccount.
WORKLOAD_ONLY = {
    ("", "namespaces"),  # read by a drain, for MachineDrainRules' namespaceSelectors
    ("", "nodes"),
    ("", "pods"),
    ("policy", "poddisruptionbudgets"),
    ("", "persistentvolumes"),
    ("storage.k8s.io", "volumeattachments"),
}
# Named by code that never runs in a cluster install (webhook self-registration is for local
# runs; the manifests carry the webhook configurations).
LOCAL_ONLY = {
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
}
# Named only by the take-over of upstream's MachinePool webhooks (--beside-upstream), which the
# beside-upstream overlay grants (test_beside_upstream_rbac_covers_the_take_over).
BESIDE_ONLY = {("", "configmaps")}
# Always used through the runtime: leader election (Role), events, kubeconfig Secrets.
RUNTIME = {("cluster.x-k8s.io", "clusters"), ("events.k8s.io", "events"), ("", "secrets")}
# Leases: leader election and shard Leases, granted by a Role in the manager's own namespace.
THROUGH_ROLE = {("coordination.k8s.io", "leases")}
PACKAGES = {
    "core": ["machinepool.controllers", "machinepool.webhooks"],
    "bootstrap": ["machinepool.bootstrap"],
    "sim": ["machinepool.providers.sim", "machinepool.providers.pool", "machinepool.simworld"],
    "aws": ["machinepool.providers.aws", "machinepool.providers.pool"],
}


def _modules(package: str) -> Iterator[ModuleType]:
    root = importlib.import_module(package)
    yield root
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        yield importlib.import_module(info.name)


def resources_named_by(component: str) -> set[tuple[str, str]]:
    """(group, plural) of every module-level ``Resource`` in the component's packages."""
    found = set(RUNTIME)
    for package in PACKAGES[component]:
        for module in _modules(package):
            for value in vars(module).values():
                if isinstance(value, Resource):
                    found.add((value.group, value.plural))
    return found - WORKLOAD_ONLY - LOCAL_ONLY - THROUGH_ROLE - BESIDE_ONLY


@pytest.mark.parametrize("component", ALL)
def test_rbac_covers_every_resource_the_code_names(component: str) -> None:
    granted = {(g, r) for g, r, _ in manager_cluster_rules(component)}
    missing = sorted(resources_named_by(component) - granted)
    assert not missing, f"{component} code uses {missing} but its ClusterRole does not grant them"


def test_core_reaches_provider_kinds_only_through_aggregation() -> None:
    core_role = one(objects("core"), "ClusterRole", "machinepool-manager-role")
    groups = {g for g, _, _ in rules(core_role)}
    assert not groups & {"bootstrap.cluster.x-k8s.io", "infrastructure.cluster.x-k8s.io"}
    granted = {(g, r) for g, r, _ in manager_cluster_rules("core")}
    for component in ("bootstrap", "sim", "aws"):
        for crd in of_kind(objects(component), "CustomResourceDefinition"):
            pair = (crd["spec"]["group"], crd["spec"]["names"]["plural"])
            assert pair in granted, f"core cannot reach {pair} shipped by {component}"


@pytest.mark.parametrize("component", ALL)
def test_each_manager_may_review_metrics_callers_and_nothing_more(component: str) -> None:
    """Secure /metrics asks TokenReview and SubjectAccessReview as the manager itself."""
    objs = objects(component)
    (binding,) = [b for b in of_kind(objs, "ClusterRoleBinding") if _metrics_auth(b)]
    sa = one(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    assert [s["name"] for s in binding["subjects"]] == [sa]
    role = one(objs, "ClusterRole", binding["roleRef"]["name"])
    assert set(rules(role)) == {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    }


def test_metrics_reader_grants_get_on_metrics_only() -> None:
    reader = one(objects("core"), "ClusterRole", "machinepool-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


# -- Deployments -------------------------------------------------------------------------------


def _run_flags() -> set[str]:
    from machinepool.cli.app import app

    command = typer.main.get_command(app)
    run = command.commands["run"]  # type: ignore[attr-defined]
    # get_params: the component options are added there, when run is parsed
    params = run.get_params(typer.Context(run))
    return {opt for p in params for opt in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("component", MANAGERS)
def test_deployment_runs_the_manager_safely(component: str) -> None:
    deployment = one(objects(component), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    # canonical, as clusterctl requires of every image it reads (docker.io/library/machinepool
    # is what `docker build -t machinepool:...` names)
    assert container["image"] == f"docker.io/library/machinepool:{gen.version()}"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    # The kubelet probes without credentials: probes on their own plain-HTTP port, /metrics
    # on the secure diagnostics listener (no --insecure-diagnostics in a cluster).
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "healthz"}
    args = container["args"]
    assert "--leader-elect" in args
    assert "--leader-election-namespace=$(POD_NAMESPACE)" in args
    assert f"--diagnostics-address=0.0.0.0:{ports['metrics']}" in args
    assert f"--health-probe-bind-address=0.0.0.0:{ports['healthz']}" in args
    assert "--insecure-diagnostics" not in args
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


@pytest.mark.parametrize("component", MANAGERS)
def test_metrics_service_selects_the_manager(component: str) -> None:
    objs = objects(component)
    deployment = one(objs, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    services = [s for s in of_kind(objs, "Service") if s["metadata"]["name"].endswith("metrics")]
    (service,) = services
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


@pytest.mark.parametrize("component", MANAGERS)
def test_deployment_flags_are_flags_of_machinepool_run(component: str) -> None:
    known = _run_flags()
    container = one(objects(component), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    unknown = [a.split("=")[0] for a in container["args"] if a.split("=")[0] not in known]
    assert not unknown, f"`machinepool run` has no flags {unknown}"


@pytest.mark.parametrize("component", MANAGERS)
def test_components_run_only_known_components(component: str) -> None:
    from machinepool.app import COMPONENTS as RUNNABLE

    container = one(objects(component), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    (arg,) = [a for a in container["args"] if a.startswith("--components=")]
    assert set(arg.split("=", 1)[1].split(",")) <= set(RUNNABLE)


@pytest.mark.parametrize("component", MANAGERS)
def test_every_object_carries_the_provider_label(component: str) -> None:
    provider = COMPONENTS[component].provider
    for obj in objects(component):
        labels = obj["metadata"].get("labels") or {}
        assert labels.get("cluster.x-k8s.io/provider") == provider, obj["metadata"]["name"]


# -- webhooks and certificates -----------------------------------------------------------------


def test_webhooks_match_the_webhook_server() -> None:
    from machinepool.webhooks import CONVERT_PATH, MUTATE_PATH, VALIDATE_PATH
    from machinepool.webhooks.registration import (
        DEFAULTING_WEBHOOK_NAME,
        VALIDATING_WEBHOOK_NAME,
    )
    from machinepool.webhooks.server import MHC_MUTATE_PATH, MHC_VALIDATE_PATH

    objs = objects("core")
    service = one(objs, "Service", gen.WEBHOOK_SERVICE)
    deployment = one(objs, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert service["spec"]["ports"][0]["targetPort"] == "webhook"
    assert f"--webhook-port={ports['webhook']}" in container["args"]
    expected = {
        "MutatingWebhookConfiguration": (
            DEFAULTING_WEBHOOK_NAME,
            MUTATE_PATH,
            {"CREATE", "UPDATE"},
        ),
        "ValidatingWebhookConfiguration": (
            VALIDATING_WEBHOOK_NAME,
            VALIDATE_PATH,
            {"CREATE", "UPDATE", "DELETE"},
        ),
    }
    for kind, (name, path, operations) in expected.items():
        hook, health_check_hook = one(objs, kind)["webhooks"]
        assert health_check_hook["clientConfig"]["service"]["path"] == (
            MHC_MUTATE_PATH if kind.startswith("Mutating") else MHC_VALIDATE_PATH
        )
        assert health_check_hook["rules"][0]["resources"] == ["machinehealthchecks"]
        assert hook["name"] == name
        assert hook["failurePolicy"] == "Fail"
        ref = hook["clientConfig"]["service"]
        assert ref == {
            "namespace": gen.CORE_NAMESPACE,
            "name": gen.WEBHOOK_SERVICE,
            "path": path,
            "port": 443,
        }
        (rule,) = hook["rules"]
        assert set(rule["operations"]) == operations
        assert rule["resources"] == ["machinepools"]
    for name in gen.CONVERTED_CRDS:
        conversion = one(objs, "CustomResourceDefinition", name)["spec"]["conversion"]
        assert conversion["strategy"] == "Webhook"
        assert conversion["webhook"]["clientConfig"]["service"]["path"] == CONVERT_PATH


def test_cert_manager_certificate_is_mounted_and_injected() -> None:
    objs = objects("core")
    cert = one(objs, "Certificate")
    issuer = one(objs, "Issuer", cert["spec"]["issuerRef"]["name"])
    assert "selfSigned" in issuer["spec"]
    host = f"{gen.WEBHOOK_SERVICE}.{gen.CORE_NAMESPACE}.svc"
    assert host in cert["spec"]["dnsNames"]
    assert cert["spec"]["secretName"] == gen.WEBHOOK_SECRET
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == gen.WEBHOOK_SECRET
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert f"--webhook-cert-dir={mounts[volume['name']]}" in pod["containers"][0]["args"]
    inject = f"{cert['metadata']['namespace']}/{cert['metadata']['name']}"
    for kind, name in [
        *gen.WEBHOOK_CONFIGURATIONS,
        ("CustomResourceDefinition", gen.CONVERTED_CRD),
    ]:
        annotations = one(objs, kind, name)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == inject


# -- image ---------------------------------------------------------------------------------------


def test_dockerfile_is_multi_stage_non_root_and_runs_machinepool_run() -> None:
    text = (REPO / "deploy/Dockerfile").read_text()
    lines = [
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    ]
    assert "ARG DEBIAN_IMAGE=debian:bookworm-slim" in lines
    froms = [line for line in lines if line.startswith("FROM ")]
    assert froms == ["FROM ${DEBIAN_IMAGE} AS builder", "FROM ${DEBIAN_IMAGE}"]
    assert "COPY --from=builder /opt/machinepool /opt/machinepool" in lines
    users = [line for line in lines if line.startswith("USER ")]
    assert users
    assert users[-1].split()[1].split(":")[0] not in ("0", "root")
    assert lines[-1] == 'ENTRYPOINT ["machinepool", "run"]'
    ignore = (REPO / "deploy/Dockerfile.dockerignore").read_text().splitlines()
    for needed in ("!pyproject.toml", "!README.md", "!src/"):
        assert needed in ignore


# -- cluster templates -----------------------------------------------------------------------


TEMPLATE_VALUES = {
    "CLUSTER_NAME": "demo",
    "NAMESPACE": "default",
    "KUBERNETES_VERSION": "v1.34.4",
    "WORKER_MACHINE_COUNT": "3",
    "CONTROL_PLANE_ENDPOINT_HOST": "10.0.0.1",
}


@pytest.mark.parametrize("flavor", ["sim", "aws"])
def test_template_becomes_valid_objects(flavor: str) -> None:
    from machinepool.api.bootstrap_v1beta2 import KubeadmConfig
    from machinepool.api.core_v1beta2 import Cluster, MachinePool

    path = REPO / f"deploy/templates/cluster-template-machinepool-{flavor}.yaml"
    text = path.read_text()
    required = {k for k, v in gen.variables(text).items() if v is None}
    assert required == {
        "CLUSTER_NAME",
        "NAMESPACE",
        "KUBERNETES_VERSION",
        "CONTROL_PLANE_ENDPOINT_HOST",
    }
    docs = [d for d in yaml.safe_load_all(gen.substitute(text, TEMPLATE_VALUES)) if d]
    kinds = [d["kind"] for d in docs]
    infra = {"sim": "SimMachinePool", "aws": "AWSMachinePool"}[flavor]
    assert kinds == ["Cluster", "KubeadmConfig", infra, "MachinePool"]
    Cluster.from_dict(docs[0])
    KubeadmConfig.from_dict(docs[1])
    pool = MachinePool.from_dict(docs[3])
    assert pool.spec.replicas == 3
    refs = docs[3]["spec"]["template"]["spec"]
    assert refs["infrastructureRef"]["kind"] == infra
    assert refs["infrastructureRef"]["name"] == docs[2]["metadata"]["name"]
    assert refs["bootstrap"]["configRef"]["name"] == docs[1]["metadata"]["name"]
    assert all(d["metadata"]["namespace"] == "default" for d in docs)


# -- beside upstream Cluster API ------------------------------------------------------------


def test_beside_upstream_installs_nothing_upstream_owns() -> None:
    objs = objects("beside-upstream")
    assert not of_kind(objs, "CustomResourceDefinition"), "upstream's core owns the CRDs there"
    names = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert not [n for n in names if n[1].startswith("capi-")], names
    assert ("Namespace", "machinepool-system") in names
    # MachineHealthChecks are upstream's there: neither their admission nor their RBAC.
    for kind, name in gen.WEBHOOK_CONFIGURATIONS:
        hooks = one(objs, kind, name)["webhooks"]
        assert [h["rules"][0]["resources"] for h in hooks] == [["machinepools"]]
    assert not any(
        "machinehealthchecks" in r.get("resources", [])
        for role in of_kind(objs, "ClusterRole")
        for r in role.get("rules") or []
    )


def test_beside_upstream_runs_only_our_core_beside_upstream() -> None:
    container = one(objects("beside-upstream"), "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert "--beside-upstream" in container["args"]
    assert "--components=core" in container["args"]


def test_beside_upstream_injects_our_ca_into_our_webhooks_only() -> None:
    objs = objects("beside-upstream")
    for kind, name in gen.WEBHOOK_CONFIGURATIONS:
        annotations = one(objs, kind, name)["metadata"]["annotations"]
        assert annotations == {
            "cert-manager.io/inject-ca-from": "machinepool-system/machinepool-serving-cert"
        }
    certificate = one(objs, "Certificate")
    assert certificate["metadata"]["name"] == "machinepool-serving-cert"


def test_beside_upstream_rbac_covers_the_take_over() -> None:
    """What ``machinepool.webhooks.beside`` names is granted: the webhook configurations and
    the MachinePool CRD cluster-wide (the CRD by name only), the record in our namespace."""
    from machinepool.webhooks import beside

    objs = objects("beside-upstream")
    # Each ClusterRole here is bound, directly or through the aggregated manager role.
    granted = {t for role in of_kind(objs, "ClusterRole") for t in rules(role)}
    named = {(v.group, v.plural) for v in vars(beside).values() if isinstance(v, Resource)} - {
        ("", "configmaps")
    }
    assert named <= {(g, r) for g, r, _ in granted}, named - {(g, r) for g, r, _ in granted}
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        assert {("admissionregistration.k8s.io", kind, v) for v in ("list", "update")} <= granted
    role = one(objs, "ClusterRole", "machinepool-beside-upstream-role")
    (crd_rule,) = [r for r in role["rules"] if r["apiGroups"] == ["apiextensions.k8s.io"]]
    assert crd_rule["resourceNames"] == ["machinepools.cluster.x-k8s.io"]
    record_role = one(objs, "Role", "machinepool-beside-upstream-record-role")
    assert record_role["metadata"]["namespace"] == "machinepool-system"
    assert ("", "configmaps", "create") in set(rules(record_role))
