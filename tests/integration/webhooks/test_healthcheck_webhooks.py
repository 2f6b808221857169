"""MachineHealthCheck defaulting, validation and v1beta1 conversion through the real apiserver.

The ``webhooks`` fixture registers our server for MachinePools and MachineHealthChecks (and
both CRDs' conversion); cases follow upstream's core/webhooks/admission/machinehealthcheck.go.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.support import eventually
from tests.support.resources import MACHINE_HEALTH_CHECKS, MACHINE_HEALTH_CHECKS_V1BETA1

from machinepool.runtime import ApiError, Client
from machinepool.webhooks import WebhookServer


def _mhc(namespace: str, name: str = "mhc", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": MACHINE_HEALTH_CHECKS.api_version,
        "kind": "MachineHealthCheck",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "clusterName": "c1",
            "selector": {"matchLabels": {"cluster.x-k8s.io/pool-name": "workers"}},
            **spec,
        },
    }


async def _effective(client: Client, namespace: str) -> None:
    """Until the apiserver calls our MachineHealthCheck webhook (configurations take a moment)."""

    async def refused() -> bool:
        try:
            await client.create(
                MACHINE_HEALTH_CHECKS,
                _mhc(namespace, "probe", selector={}),
                namespace,
                dry_run=True,
            )
        except ApiError as err:
            return "selector must not be empty" in err.message
        return False

    await eventually(refused, within=30.0)


async def _refusal(client: Client, namespace: str, body: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as caught:
        await client.create(MACHINE_HEALTH_CHECKS, body, namespace)
    return caught.value.message


async def test_create_is_defaulted(client: Client, namespace: str, webhooks: WebhookServer) -> None:
    await _effective(client, namespace)
    created = await client.create(MACHINE_HEALTH_CHECKS, _mhc(namespace), namespace)
    assert created["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "c1"
    assert created["spec"]["checks"]["nodeStartupTimeoutSeconds"] == 600


async def test_bad_input_is_refused_naming_the_field(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    await _effective(client, namespace)
    message = await _refusal(
        client, namespace, _mhc(namespace, checks={"nodeStartupTimeoutSeconds": 10})
    )
    assert (
        'MachineHealthCheck.cluster.x-k8s.io "mhc" is invalid: '
        "spec.checks.nodeStartupTimeoutSeconds: Invalid value: 10: must be at least 30s"
    ) in message
    message = await _refusal(
        client,
        namespace,
        _mhc(namespace, remediation={"triggerIf": {"unhealthyLessThanOrEqualTo": "half"}}),
    )
    assert "spec.remediation.triggerIf.unhealthyLessThanOrEqualTo" in message
    assert "must be either an int or a percentage" in message
    reserved = {
        "unhealthyMachineConditions": [{"type": "Ready", "status": "False", "timeoutSeconds": 5}]
    }
    message = await _refusal(client, namespace, _mhc(namespace, checks=reserved))
    assert "type must not be one of: Ready, Available, HealthCheckSucceeded" in message


async def test_cluster_name_is_immutable(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    await _effective(client, namespace)
    await client.create(MACHINE_HEALTH_CHECKS, _mhc(namespace, "fixed"), namespace)
    with pytest.raises(ApiError) as caught:
        await client.patch(
            MACHINE_HEALTH_CHECKS, "fixed", {"spec": {"clusterName": "c2"}}, namespace
        )
    assert "spec.clusterName: Forbidden: field is immutable" in caught.value.message


async def test_v1beta1_round_trips_through_the_conversion_webhook(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    await _effective(client, namespace)
    old = {
        "apiVersion": MACHINE_HEALTH_CHECKS_V1BETA1.api_version,
        "kind": "MachineHealthCheck",
        "metadata": {"name": "old", "namespace": namespace},
        "spec": {
            "clusterName": "c1",
            "selector": {"matchLabels": {"pool": "a"}},
            "maxUnhealthy": "40%",
            "nodeStartupTimeout": "10m",
            "unhealthyConditions": [{"type": "Ready", "status": "Unknown", "timeout": "5m"}],
        },
    }
    await client.create(MACHINE_HEALTH_CHECKS_V1BETA1, old, namespace)
    hub = await client.get(MACHINE_HEALTH_CHECKS, "old", namespace)
    assert hub["spec"]["checks"]["nodeStartupTimeoutSeconds"] == 600
    assert hub["spec"]["checks"]["unhealthyNodeConditions"] == [
        {"type": "Ready", "status": "Unknown", "timeoutSeconds": 300}
    ]
    assert hub["spec"]["remediation"]["triggerIf"] == {"unhealthyLessThanOrEqualTo": "40%"}
    spoke = await client.get(MACHINE_HEALTH_CHECKS_V1BETA1, "old", namespace)
    assert spoke["spec"]["nodeStartupTimeout"] == "10m"
    assert spoke["spec"]["unhealthyConditions"][0]["timeout"] == "5m"
    assert "cluster.x-k8s.io/conversion-data" not in (spoke["metadata"].get("annotations") or {})
