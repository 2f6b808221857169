"""kubectl against MachinePools, the MachinePool feature gate, and a webhook that is down."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from tests.support.resources import MACHINE_POOLS
from tests.support.waiting import until_admission_answers

from machinepool.api.features import MACHINE_POOL, FeatureGates
from machinepool.controlplane import ControlPlane, optional_binary
from machinepool.runtime import ApiError, Client
from machinepool.webhooks import WebhookServer, register, serve, unregister

from .conftest import DENIED, machine_pool

UPSTREAM_COLUMNS = ["NAME", "CLUSTER", "DESIRED", "CURRENT", "READY", "AVAILABLE", "UP-TO-DATE"]
UPSTREAM_COLUMNS += ["PHASE", "AGE", "VERSION"]


async def _kubectl(control_plane: ControlPlane, *args: str) -> str:
    kubectl = optional_binary("kubectl")
    assert kubectl is not None, "kubectl is needed: it ships with the control plane binaries"
    proc = await asyncio.create_subprocess_exec(
        str(kubectl),
        f"--kubeconfig={control_plane.kubeconfig}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_kubectl_get_shows_upstream_columns(
    client: Client, namespace: str, webhooks: WebhookServer, control_plane: ControlPlane
) -> None:
    await client.create(MACHINE_POOLS, machine_pool(namespace, replicas=2))
    out = await _kubectl(control_plane, "get", "mp", "-n", namespace)
    header, row = out.splitlines()[:2]
    assert header.split() == UPSTREAM_COLUMNS
    assert row.split()[:3] == ["mp", "c1", "2"]
    assert row.split()[-1] == "v1.34.0"
    wide = await _kubectl(control_plane, "get", "mp", "-n", namespace, "-o", "wide")
    assert "PAUSED" in wide.splitlines()[0].split()


async def test_kubectl_scale_goes_through_the_scale_subresource(
    client: Client, namespace: str, webhooks: WebhookServer, control_plane: ControlPlane
) -> None:
    await client.create(MACHINE_POOLS, machine_pool(namespace))
    await _kubectl(control_plane, "scale", "mp/mp", "--replicas=3", "-n", namespace)
    assert (await client.get(MACHINE_POOLS, "mp", namespace))["spec"]["replicas"] == 3
    assert (await client.get_scale(MACHINE_POOLS, "mp", namespace))["spec"]["replicas"] == 3


async def test_feature_gate_off_refuses_create_update_and_delete(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    # A second server with the gate off sees only MachinePools carrying its label.
    label = {"webhooks.test/gate-off": uuid.uuid4().hex[:8]}
    config = f"machinepool-gate-off-{label['webhooks.test/gate-off']}"
    existing = machine_pool(namespace, "existing")
    existing["metadata"]["labels"] = dict(label)
    await client.create(MACHINE_POOLS, existing)  # before the gate-off server is registered
    gated = await serve("127.0.0.1", 0, FeatureGates().with_gate(MACHINE_POOL, False))
    try:
        await register(
            client,
            gated.url,
            gated.ca_bundle,
            config_name=config,
            object_selector=label,
            conversion=False,
        )
        probe = machine_pool(namespace, "probe")
        probe["metadata"]["labels"] = dict(label)
        expected = (
            DENIED + "spec: Forbidden: can be set only if the MachinePool feature flag is enabled"
        )
        assert await until_admission_answers(client, MACHINE_POOLS, probe) == expected
        with pytest.raises(ApiError) as create:
            await client.create(MACHINE_POOLS, probe)
        assert create.value.message == expected
        with pytest.raises(ApiError) as update:
            await client.patch(MACHINE_POOLS, "existing", {"spec": {"replicas": 2}}, namespace)
        assert update.value.message == expected
        with pytest.raises(ApiError) as delete:
            await client.delete(MACHINE_POOLS, "existing", namespace)
        assert delete.value.message == expected
    finally:
        await unregister(client, config_name=config)
        await gated.stop()


async def test_webhook_down_fails_requests_visibly(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    label = {"webhooks.test/down": uuid.uuid4().hex[:8]}
    config = f"machinepool-down-{label['webhooks.test/down']}"
    doomed = await serve("127.0.0.1", 0)
    try:
        await register(
            client,
            doomed.url,
            doomed.ca_bundle,
            config_name=config,
            object_selector=label,
            conversion=False,
        )
        probe = machine_pool(namespace, "probe")
        probe["metadata"]["labels"] = dict(label)
        probe["spec"]["template"]["spec"]["bootstrap"] = {}
        await until_admission_answers(client, MACHINE_POOLS, probe)
        await doomed.stop()
        body = machine_pool(namespace, "orphan")
        body["metadata"]["labels"] = dict(label)
        with pytest.raises(ApiError) as caught:
            await client.create(MACHINE_POOLS, body)
        assert caught.value.status == 500
        assert (
            'failed calling webhook "default.machinepool.cluster.x-k8s.io"' in caught.value.message
        )
        assert doomed.url in caught.value.message
    finally:
        await unregister(client, config_name=config)
        await doomed.stop()
