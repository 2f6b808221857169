"""Our AWS provider and CAPA in one management cluster, and pools moved off CAPA's group.

CAPA's CRDs (and, rendered with ``kubectl kustomize``, its components) come from its Go module
through ``hack/capa/crds.sh``; the tests are left out, with a note, when that cannot fetch them.
CAPA's controller does not run here: what is shown is that both install and each keeps its own
objects, and that our pools run on the emulated AWS beside CAPA's CRDs.

The move (docs/operator-guide.md, "Moving AWS pools to the new group") starts from what a pool
made before our kinds had a group of their own is in once the provider is upgraded: its
objects under the old group, CAPA's, with the old finalizer names, watched by no controller.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from tests.integration.aws.test_aws_e2e import create, running, system
from tests.support import capa, eventually, wait_established
from tests.support.resources import AWSMACHINEPOOLS, AWSMACHINES, CLUSTERS, MACHINE_POOLS, MACHINES
from tests.support.scripts import deploy_generator

from machinepool.api import constants as c
from machinepool.api.crdgen import crd_manifests
from machinepool.api.infra_aws import AWS_PROVIDER_NAME, GROUP, LEGACY_GROUP
from machinepool.cli.awsmove import LEGACY_AWSMACHINEPOOLS, LEGACY_AWSMACHINES
from machinepool.controlplane import ControlPlane
from machinepool.controlplane.binaries import optional_binary
from machinepool.runtime import CRDS, NODES, Client, NotFound, Obj, Resource

pytestmark = pytest.mark.capa_crds

__all__ = ["system"]  # the e2e module's fixture: core, kubeadm bootstrap and the AWS provider

REPO = Path(__file__).resolve().parents[3]
CAPA_PROVIDER = "infrastructure-aws"
"""What clusterctl labels CAPA's components with (``clusterctl init --infrastructure aws``)."""
VALUES = {"AWS_B64ENCODED_CREDENTIALS": base64.b64encode(b"[default]\n").decode()}
"""clusterctl's variables for both components files (the rest have defaults)."""


gen = deploy_generator()
CAPA_AWSMACHINEPOOLS = Resource(
    c.INFRASTRUCTURE_GROUP, "v1beta2", "awsmachinepools", "AWSMachinePool"
)


def kubectl_binary() -> str:
    binary = optional_binary("kubectl") or shutil.which("kubectl")
    assert binary is not None, "kubectl is missing: run `make controlplane`"
    return str(binary)


def kubectl(cp: ControlPlane, *args: str, stdin: str | None = None) -> str:
    """kubectl as a user runs it, with a discovery cache of its own (the CRDs change here)."""
    with tempfile.TemporaryDirectory() as cache:
        out = subprocess.run(
            [kubectl_binary(), "--kubeconfig", str(cp.kubeconfig), "--cache-dir", cache, *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
        )
    assert out.returncode == 0, out.stderr
    return out.stdout


async def install_crds(client: Client, crds: list[Obj]) -> AsyncIterator[list[str]]:
    """Install ``crds`` for the test, then delete them and wait until they are gone (a later
    test installs CRDs of the same names)."""
    names = []
    for crd in crds:
        await client.apply(CRDS, crd, field_manager="capa-tests")
        names.append(crd["metadata"]["name"])
    for name in names:
        await wait_established(client, name)
    yield names
    for name in names:
        with contextlib.suppress(NotFound):
            await client.delete(CRDS, name)

    async def gone() -> bool:
        left = {o["metadata"]["name"] for o in (await client.list(CRDS)).items}
        return not left & set(names)

    await eventually(gone, "the test's CRDs deleted", within=60)


@pytest_asyncio.fixture(loop_scope="session")
async def capa_crds(client: Client, crds: list[str]) -> AsyncIterator[list[str]]:
    """Every CRD of CAPA v2.13.0, as ``kubectl apply -f config/crd/bases`` installs them."""
    docs = []
    for path in sorted((capa.config() / "crd" / "bases").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    async for names in install_crds(client, docs):
        yield names


@pytest_asyncio.fixture(loop_scope="session")
async def legacy_crds(client: Client, crds: list[str]) -> AsyncIterator[list[str]]:
    """Our AWS CRDs as they were before the group changed: CAPA's group and names (the kinds
    there were then; the pool template came after the move)."""
    before = {LEGACY_AWSMACHINEPOOLS.kind, LEGACY_AWSMACHINES.kind}
    old = []
    for crd in crd_manifests():
        if crd["spec"]["group"] != GROUP or crd["spec"]["names"]["kind"] not in before:
            continue
        crd["spec"]["group"] = LEGACY_GROUP
        crd["metadata"]["name"] = f"{crd['spec']['names']['plural']}.{LEGACY_GROUP}"
        crd["metadata"]["labels"][c.PROVIDER_LABEL] = "infrastructure-aws"
        crd["spec"]["names"]["shortNames"] = [
            {"mpawsmp": "awsmp", "mpawsm": "awsm"}[s] for s in crd["spec"]["names"]["shortNames"]
        ]
        old.append(crd)
    async for names in install_crds(client, old):
        yield names


# --- both installed ---------------------------------------------------------------------------


async def test_our_aws_pool_runs_beside_capas_crds_and_kinds(
    aws_env: Any, system: Any, capa_crds: list[str], control_plane: ControlPlane
) -> None:
    client, ns = aws_env.client, aws_env.namespace
    ours = await client.get(CRDS, f"awsmachinepools.{GROUP}")
    capas = await client.get(CRDS, f"awsmachinepools.{c.INFRASTRUCTURE_GROUP}")
    assert ours["spec"]["group"] == GROUP
    assert ours["metadata"]["labels"][c.PROVIDER_LABEL] == AWS_PROVIDER_NAME
    assert capas["spec"]["group"] == c.INFRASTRUCTURE_GROUP
    assert c.PROVIDER_LABEL not in (capas["metadata"].get("labels") or {})

    # A CAPA AWSMachinePool, as CAPA's docs write one: accepted by CAPA's CRD, left alone by us.
    capa_pool = {
        "metadata": {"name": "capa-pool", "namespace": ns},
        "spec": {
            "minSize": 1,
            "maxSize": 3,
            "awsLaunchTemplate": {"instanceType": "t3.small", "ami": {"id": "ami-123"}},
        },
    }
    await client.create(CAPA_AWSMACHINEPOOLS, capa_pool, ns)

    await create(aws_env, "ours", 2)
    mp = await eventually(lambda: running(aws_env, "ours", 2), "our pool Running", within=120)
    assert len(mp["spec"]["providerIDList"]) == 2

    left_alone = await client.get(CAPA_AWSMACHINEPOOLS, "capa-pool", ns)
    assert left_alone["apiVersion"] == f"{c.INFRASTRUCTURE_GROUP}/v1beta2"
    assert not left_alone["metadata"].get("finalizers")
    assert "status" not in left_alone
    assert await aws_env.group("capa-pool") is None

    # kubectl: the plain names mean CAPA's kinds; ours by group or by their own short names.
    assert kubectl(control_plane, "get", "awsmachinepools", "-n", ns, "-o", "name").split() == [
        f"awsmachinepool.{c.INFRASTRUCTURE_GROUP}/capa-pool"
    ]
    assert kubectl(control_plane, "get", "mpawsmp", "-n", ns, "-o", "name").split() == [
        f"awsmachinepool.{GROUP}/ours"
    ]
    assert kubectl(
        control_plane, "get", f"awsmachinepools.{GROUP}", "-n", ns, "-o", "name"
    ).split() == [f"awsmachinepool.{GROUP}/ours"]


def _identity(obj: Obj) -> tuple[str, str, str, str]:
    group = obj["apiVersion"].rpartition("/")[0]
    return (group, obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


def capa_components() -> list[Obj]:
    """CAPA's components as its release file has them: config/default, variables substituted
    (every object carries CAPA's clusterctl label)."""
    rendered = subprocess.run(
        [kubectl_binary(), "kustomize", str(capa.config() / "default")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # The one bash-style replacement in it, `${AWS_CONTROLLER_IAM_ROLE/#arn/...}` (the IRSA
    # annotation's key), which clusterctl turns into nothing when no IAM role is given.
    rendered = re.sub(r"^\s*\$\{AWS_CONTROLLER_IAM_ROLE/#arn/.*\n", "", rendered, flags=re.M)
    docs = [d for d in yaml.safe_load_all(gen.substitute(rendered, VALUES)) if d]
    assert {d["metadata"]["labels"][c.PROVIDER_LABEL] for d in docs} == {CAPA_PROVIDER}
    return docs


def our_components() -> list[Obj]:
    text = (REPO / "deploy/release/infrastructure-components-aws.yaml").read_text()
    return [d for d in yaml.safe_load_all(gen.substitute(text, VALUES)) if d]


async def test_capas_components_and_ours_apply_side_by_side_and_keep_their_labels(
    client: Client, control_plane: ControlPlane, cert_manager_api: Any
) -> None:
    """Every object of each provider has a name of its own, and after both are applied each
    keeps its provider label: ``clusterctl delete --infrastructure aws`` (which deletes what
    carries CAPA's label) would take nothing of ours. CRDs and webhook configurations are
    compared, not applied (the session's other tests rely on their own CRDs, and a webhook
    with no pod behind it would refuse writes)."""
    capa, ours = capa_components(), our_components()
    shared = {_identity(o) for o in capa} & {_identity(o) for o in ours}
    assert not shared, shared
    assert {o["metadata"]["labels"][c.PROVIDER_LABEL] for o in ours} == {AWS_PROVIDER_NAME}

    skipped = ("CustomResourceDefinition", "MutatingWebhookConfiguration")
    applied = [
        o for o in capa + ours if o["kind"] not in (*skipped, "ValidatingWebhookConfiguration")
    ]
    await cert_manager_api(client)
    manifest = "".join("---\n" + yaml.safe_dump(o) for o in applied)
    try:
        kubectl(
            control_plane,
            "apply",
            "--server-side",
            "--field-manager=capa-tests",
            "-f",
            "-",
            stdin=manifest,
        )
        for obj in applied:
            group, kind, namespace, name = _identity(obj)
            args = ["get", f"{kind}.{group}" if group else kind, name, "-o", "yaml"]
            served = yaml.safe_load(
                kubectl(control_plane, *args, *(["-n", namespace] if namespace else []))
            )
            assert (
                served["metadata"]["labels"][c.PROVIDER_LABEL]
                == obj["metadata"]["labels"][c.PROVIDER_LABEL]
            )
        selected = kubectl(
            control_plane,
            "get",
            "clusterroles,clusterrolebindings,namespaces,deployments,services,serviceaccounts",
            "-A",
            "-l",
            f"{c.PROVIDER_LABEL}={CAPA_PROVIDER}",
            "-o",
            "name",
        ).split()
        assert selected
        assert not [n for n in selected if "machinepool" in n], selected
    finally:
        kubectl(
            control_plane, "delete", "--ignore-not-found", "--wait=true", "-f", "-", stdin=manifest
        )


# --- moving a pool made under the old group -------------------------------------------------


async def _as_before_the_rename(client: Client, ns: str, pool: str) -> None:
    """Our pool's objects as the provider before the rename left them: under the old group,
    with the old finalizer names (what the upgrade leaves, no controller watching them)."""
    new_pool = await client.get(AWSMACHINEPOOLS, pool, ns)
    meta = {k: new_pool["metadata"][k] for k in ("name", "labels", "ownerReferences")}
    meta["finalizers"] = [f"awsmachinepool.{LEGACY_GROUP}"]
    old_pool = await client.create(
        LEGACY_AWSMACHINEPOOLS, {"metadata": meta, "spec": new_pool["spec"]}, ns
    )
    await client.patch(
        LEGACY_AWSMACHINEPOOLS, pool, {"status": new_pool["status"]}, ns, subresource="status"
    )
    for machine in (await client.list(AWSMACHINES, ns)).items:
        meta = {k: machine["metadata"][k] for k in ("name", "labels", "ownerReferences")}
        meta["finalizers"] = [f"awsmachine.{LEGACY_GROUP}"]
        meta["ownerReferences"] = [
            {**r, "apiVersion": old_pool["apiVersion"], "uid": old_pool["metadata"]["uid"]}
            if r["kind"] == "AWSMachinePool"
            else r
            for r in meta["ownerReferences"]
        ]
        await client.create(LEGACY_AWSMACHINES, {"metadata": meta, "spec": machine["spec"]}, ns)
        await client.patch(
            LEGACY_AWSMACHINES,
            meta["name"],
            {"status": machine["status"]},
            ns,
            subresource="status",
        )
        await client.patch(AWSMACHINES, meta["name"], {"metadata": {"finalizers": None}}, ns)
        await client.delete(AWSMACHINES, meta["name"], ns)
    await client.patch(AWSMACHINEPOOLS, pool, {"metadata": {"finalizers": None}}, ns)
    await client.delete(AWSMACHINEPOOLS, pool, ns)
    old = {"apiGroup": LEGACY_GROUP}
    for machine in (await client.list(MACHINES, ns)).items:
        await client.patch(
            MACHINES, machine["metadata"]["name"], {"spec": {"infrastructureRef": old}}, ns
        )
    await client.patch(
        MACHINE_POOLS, pool, {"spec": {"template": {"spec": {"infrastructureRef": old}}}}, ns
    )


async def set_paused(client: Client, ns: str, cluster: str, paused: bool) -> None:
    await client.patch(CLUSTERS, cluster, {"spec": {"paused": paused}}, ns)


async def move_group(control_plane: ControlPlane, ns: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "machinepool", "aws", "move-group"]
    args += ["--kubeconfig", str(control_plane.kubeconfig), "-n", ns]
    return await asyncio.to_thread(
        subprocess.run, args, capture_output=True, text=True, check=False
    )


async def test_a_pool_made_under_the_old_group_moves_with_no_instance_replaced(
    aws_env: Any, system: Any, legacy_crds: list[str], control_plane: ControlPlane
) -> None:
    client, ns, fake = aws_env.client, aws_env.namespace, aws_env.fake
    await create(aws_env, "legacy", 2)
    before = await eventually(lambda: running(aws_env, "legacy", 2), "pool Running", within=120)
    machines = {
        m["metadata"]["name"]: m["metadata"]["uid"] for m in (await client.list(MACHINES, ns)).items
    }
    assert len(machines) == 2

    # 0. Not while a pool's Cluster runs: the move is refused, naming the step it needs first.
    stray = {"metadata": {"name": "stray", "labels": {c.CLUSTER_NAME_LABEL: aws_env.cluster}}}
    stray["spec"] = {"minSize": 0, "maxSize": 1, "awsLaunchTemplate": {}}
    await client.create(LEGACY_AWSMACHINEPOOLS, stray, ns)
    refused = await move_group(control_plane, ns)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    said = " ".join(refused.stderr.split())  # as one line, however the console wrapped it
    assert f"Cluster {ns}/{aws_env.cluster} of AWSMachinePool stray is not paused" in said, said
    await client.delete(LEGACY_AWSMACHINEPOOLS, "stray", ns)

    # 1. Pause the Cluster (the note's first step), then the state the upgrade leaves.
    await set_paused(client, ns, aws_env.cluster, True)
    await _as_before_the_rename(client, ns, "legacy")
    mark = aws_env.seq()

    # 2. Move, with the Cluster paused.
    out = await move_group(control_plane, ns)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"moved 1 AWSMachinePool(s) to {GROUP}: legacy" in out.stdout, out.stdout
    # Repointed before anything runs again (a Machine's controller reads its ref first).
    mp = await client.get(MACHINE_POOLS, "legacy", ns)
    assert mp["spec"]["template"]["spec"]["infrastructureRef"]["apiGroup"] == GROUP
    moved = (await client.list(MACHINES, ns)).items
    assert {m["spec"]["infrastructureRef"]["apiGroup"] for m in moved} == {GROUP}

    # 3. Unpause: our provider and core take the pool over as it is.
    await set_paused(client, ns, aws_env.cluster, False)
    after = await eventually(
        lambda: running(aws_env, "legacy", 2), "pool Running again", within=120
    )
    assert after["spec"]["template"]["spec"]["infrastructureRef"]["apiGroup"] == GROUP
    assert sorted(after["spec"]["providerIDList"]) == sorted(before["spec"]["providerIDList"])
    pool = await eventually(
        lambda: _ready_with_finalizer(client, ns), "the moved AWSMachinePool reconciled", within=60
    )
    assert pool["status"]["asgName"] == "legacy"
    now = {m["metadata"]["name"]: m for m in (await client.list(MACHINES, ns)).items}
    assert {n: m["metadata"]["uid"] for n, m in now.items()} == machines, "Machines replaced"
    assert all(m["spec"]["infrastructureRef"]["apiGroup"] == GROUP for m in now.values())
    assert sorted(
        m["metadata"]["name"] for m in (await client.list(AWSMACHINES, ns)).items
    ) == sorted(machines)
    nodes = (await aws_env.workload_client.list(NODES)).items
    assert not [n["metadata"]["name"] for n in nodes if n["spec"].get("unschedulable")]
    for action in (
        "CreateAutoScalingGroup",
        "CreateLaunchTemplate",
        "CreateLaunchTemplateVersion",
        "StartInstanceRefresh",
        "TerminateInstanceInAutoScalingGroup",
    ):
        assert not [n for n, _ in fake.calls(action) if n > mark], f"{action} after the move"

    # 4. Nothing is left under the old group, so its CRDs go at once; the pool still scales.
    assert not (await client.list(LEGACY_AWSMACHINEPOOLS, ns)).items
    assert not (await client.list(LEGACY_AWSMACHINES, ns)).items
    for name in legacy_crds:
        await client.delete(CRDS, name)

    async def crds_gone() -> bool:
        left = {o["metadata"]["name"] for o in (await client.list(CRDS)).items}
        return not left & set(legacy_crds)

    await eventually(crds_gone, "the old CRDs deleted", within=30)
    await aws_env.scale("legacy", 3)
    await eventually(lambda: running(aws_env, "legacy", 3), "the moved pool scaled", within=120)


async def _ready_with_finalizer(client: Client, ns: str) -> Obj | None:
    pool = await client.get(AWSMACHINEPOOLS, "legacy", ns)
    ready = (pool.get("status") or {}).get("ready")
    return pool if ready and pool["metadata"].get("finalizers") else None
