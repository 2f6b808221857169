"""MachinePool defaulting and validation through the real apiserver, message for message.

Cases are upstream's (core/webhooks/admission/machinepool_test.go); each rejection is checked
against the exact text a client sees.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from tests.support.resources import MACHINE_POOLS

from machinepool.api.features import MACHINE_POOL_NODE_TAINTS
from machinepool.runtime import ApiError, Client, Invalid, PatchType
from machinepool.webhooks import WebhookServer

from .conftest import DEFAULT_DENIED, DENIED, machine_pool

MIN = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
MAX = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"


async def _refusal(client: Client, body: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as caught:
        await client.create(MACHINE_POOLS, body)
    return caught.value.message


async def test_create_defaults_label_replicas_deletion_timeout_and_version(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    body = machine_pool(namespace)
    body["spec"]["template"]["spec"]["version"] = "1.20.0"
    created = await client.create(MACHINE_POOLS, body)
    assert created["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "c1"
    assert created["spec"]["replicas"] == 1
    assert created["spec"]["template"]["spec"]["version"] == "v1.20.0"
    assert created["spec"]["template"]["spec"]["deletion"] == {"nodeDeletionTimeoutSeconds": 10}


@pytest.mark.parametrize(
    ("annotations", "replicas", "expected"),
    [
        ({}, 5, 5),
        ({}, None, 1),
        ({MIN: "3"}, None, 1),
        ({MAX: "7"}, None, 1),
        ({MIN: "3", MAX: "7"}, None, 3),
    ],
    ids=["keep-set", "default-1", "only-min", "only-max", "new-uses-min"],
)
async def test_replicas_on_create(
    client: Client,
    namespace: str,
    webhooks: WebhookServer,
    annotations: dict[str, str],
    replicas: int | None,
    expected: int,
) -> None:
    body = machine_pool(namespace)
    body["metadata"]["annotations"] = annotations
    if replicas is not None:
        body["spec"]["replicas"] = replicas
    created = await client.create(MACHINE_POOLS, body)
    assert created["spec"]["replicas"] == expected


@pytest.mark.parametrize(
    ("annotation", "value"),
    [(MIN, "abc"), (MAX, "abc")],
    ids=["min-invalid", "max-invalid"],
)
async def test_replicas_with_unparsable_size_annotation_is_refused(
    client: Client, namespace: str, webhooks: WebhookServer, annotation: str, value: str
) -> None:
    body = machine_pool(namespace)
    body["metadata"]["annotations"] = {MIN: "3", MAX: "7", annotation: value}
    message = await _refusal(client, body)
    assert message == (
        DEFAULT_DENIED + "failed to caculate MachinePool replicas value: could not parse the "
        f'value of the "{annotation}" annotation: strconv.ParseInt: parsing "abc": invalid syntax'
    )


@pytest.mark.parametrize(
    ("old_replicas", "expected"),
    [(1, 3), (15, 7), (4, 4)],
    ids=["below-min", "above-max", "within-range"],
)
async def test_replicas_on_update_follow_autoscaler_range(
    client: Client,
    namespace: str,
    webhooks: WebhookServer,
    old_replicas: int,
    expected: int,
) -> None:
    # (An old object without replicas cannot exist behind the defaulting webhook; that
    # upstream case is covered by the unit tests of calculate_replicas.)
    created = await client.create(MACHINE_POOLS, machine_pool(namespace, replicas=old_replicas))
    patch: list[dict[str, Any]] = [
        {"op": "add", "path": "/metadata/annotations", "value": {MIN: "3", MAX: "7"}},
        {"op": "remove", "path": "/spec/replicas"},
    ]
    updated = await client.patch(
        MACHINE_POOLS, created["metadata"]["name"], patch, namespace, patch_type=PatchType.JSON
    )
    assert updated["spec"]["replicas"] == expected


async def test_bootstrap_config_ref_or_data_secret_name_required(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    body = machine_pool(namespace)
    body["spec"]["template"]["spec"]["bootstrap"] = {}
    assert await _refusal(client, body) == (
        DENIED + 'MachinePool.cluster.x-k8s.io "mp" is invalid: spec.template.spec.bootstrap: '
        "Required value: expected either spec.template.spec.bootstrap.dataSecretName or "
        "spec.template.spec.bootstrap.configRef to be populated"
    )
    body["spec"]["template"]["spec"]["bootstrap"] = {"dataSecretName": "test"}
    await client.create(MACHINE_POOLS, body)


async def test_cluster_name_immutable(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    created = await client.create(MACHINE_POOLS, machine_pool(namespace))
    changed = copy.deepcopy(created)
    changed["spec"]["clusterName"] = "bar"
    changed["spec"]["template"]["spec"]["clusterName"] = "bar"
    with pytest.raises(Invalid) as caught:
        await client.replace(MACHINE_POOLS, changed)
    assert caught.value.message == (
        DENIED + 'MachinePool.cluster.x-k8s.io "mp" is invalid: spec.clusterName: '
        "Forbidden: field is immutable"
    )
    same = copy.deepcopy(created)
    same["metadata"].setdefault("labels", {})["extra"] = "yes"
    await client.replace(MACHINE_POOLS, same)


async def test_cluster_names_must_match(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    body = machine_pool(namespace)
    body["spec"]["template"]["spec"]["clusterName"] = "bar"
    assert await _refusal(client, body) == (
        DENIED + 'MachinePool.cluster.x-k8s.io "mp" is invalid: spec.clusterName: Invalid value: '
        '"c1": spec.clusterName and spec.template.spec.clusterName must be set to the same value'
    )


@pytest.mark.parametrize("version", ["v1.23.3", "v1.19.0-alpha.1", "1.20.0"])
async def test_valid_versions_are_accepted(
    client: Client, namespace: str, webhooks: WebhookServer, version: str
) -> None:
    body = machine_pool(namespace)
    body["spec"]["template"]["spec"]["version"] = version
    created = await client.create(MACHINE_POOLS, body)
    assert created["spec"]["template"]["spec"]["version"] == "v" + version.removeprefix("v")


@pytest.mark.parametrize("version", ["v1.17.2++", "v1"])
async def test_invalid_versions_are_refused(
    client: Client, namespace: str, webhooks: WebhookServer, version: str
) -> None:
    body = machine_pool(namespace)
    body["spec"]["template"]["spec"]["version"] = version
    assert await _refusal(client, body) == (
        DENIED + 'MachinePool.cluster.x-k8s.io "mp" is invalid: spec.template.spec.version: '
        f'Invalid value: "{version}": must be a valid semantic version'
    )


async def test_version_without_v_is_refused_on_update_by_validation_alone(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    # Defaulting adds the "v" on every request, so "must start with v" is only reachable
    # when defaulting is bypassed; prove the prefix is added on update as well.
    created = await client.create(MACHINE_POOLS, machine_pool(namespace))
    patch = {"spec": {"template": {"spec": {"version": "1.21.1"}}}}
    updated = await client.patch(MACHINE_POOLS, "mp", patch, namespace)
    assert updated["spec"]["template"]["spec"]["version"] == "v1.21.1"
    assert created["metadata"]["uid"] == updated["metadata"]["uid"]


async def test_template_taints_need_our_gate(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    """Refused naming the gate while MachinePoolNodeTaints is off; with it on the same pool
    is admitted and stored as sent."""
    body = machine_pool(namespace)
    taints = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule", "propagation": "Always"}]
    body["spec"]["template"]["spec"]["taints"] = taints
    assert await _refusal(client, body) == (
        DENIED + 'MachinePool.cluster.x-k8s.io "mp" is invalid: spec.template.spec.taints: '
        "Forbidden: taints on a MachinePool need the feature gate MachinePoolNodeTaints (not "
        "upstream's): start the core with --feature-gates=MachinePoolNodeTaints=true, or remove "
        "spec.template.spec.taints"
    )
    off = webhooks.gates
    webhooks.gates = off.with_gate(MACHINE_POOL_NODE_TAINTS, True)
    try:
        created = await client.create(MACHINE_POOLS, body, namespace)
    finally:
        webhooks.gates = off
    assert created["spec"]["template"]["spec"]["taints"] == taints


async def test_invalid_template_metadata_keys_are_refused(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    body = machine_pool(namespace)
    body["spec"]["template"]["metadata"] = {
        "labels": {"/invalid-key": "foo"},
        "annotations": {"/invalid-key": "foo"},
    }
    assert await _refusal(client, body) == (
        DENIED + 'MachinePool.cluster.x-k8s.io "mp" is invalid: [spec.template.metadata.labels: '
        'Invalid value: "/invalid-key": prefix part must be non-empty, '
        'spec.template.metadata.annotations: Invalid value: "/invalid-key": prefix part must '
        "be non-empty]"
    )


async def test_invalid_template_label_values_are_refused(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    body = machine_pool(namespace)
    body["spec"]["template"]["metadata"] = {"labels": {"foo": "$invalid-key"}}
    assert await _refusal(client, body) == (
        DENIED + 'MachinePool.cluster.x-k8s.io "mp" is invalid: spec.template.metadata.labels: '
        'Invalid value: "$invalid-key": a valid label must be an empty string or consist of '
        "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
        "character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is "
        "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
    )


async def test_negative_replicas_are_refused_by_the_apiserver(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    # The schema has no minimum (as upstream's), but the scale subresource makes the
    # apiserver itself check spec.replicas, so no webhook rule is needed.
    body = machine_pool(namespace, replicas=-1)
    assert await _refusal(client, body) == (
        'MachinePool.cluster.x-k8s.io "mp" is invalid: .spec.replicas: Invalid value: -1: '
        "should be a non-negative integer"
    )


async def test_rollout_budgets_are_judged_at_admission_naming_the_annotation(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    """Ours: the budgets of a rollout by the core are refused when they cannot be followed,
    with the annotation and the fix; a good one passes, and fixing a bad one is accepted."""
    surge = "machinepool.cluster.x-k8s.io/rollout-max-surge"
    body = machine_pool(namespace)
    body["metadata"]["annotations"] = {
        "machinepool.cluster.x-k8s.io/rollout": "Core",
        surge: "lots",
    }
    message = await _refusal(client, body)
    assert f'metadata.annotations[{surge}]: Invalid value: "lots"' in message
    assert "percentage like '25%'" in message
    body["metadata"]["annotations"][surge] = "0"
    assert "both 0" in await _refusal(client, body)
    body["metadata"]["annotations"][surge] = "25%"
    created = await client.create(MACHINE_POOLS, body)
    assert created["metadata"]["annotations"][surge] == "25%"
