"""v1beta1 <-> v1beta2 through the apiserver's conversion webhook."""

from __future__ import annotations

from tests.support.resources import MACHINE_POOLS, MACHINE_POOLS_V1BETA1

from machinepool.runtime import Client
from machinepool.webhooks import WebhookServer

from .conftest import INFRA_GROUP, INFRA_KIND, INFRA_VERSION, machine_pool

ANNOTATION = "cluster.x-k8s.io/conversion-data"


def _v1beta1(namespace: str) -> dict[str, object]:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachinePool",
        "metadata": {"name": "old", "namespace": namespace},
        "spec": {
            "clusterName": "c1",
            "replicas": 2,
            "minReadySeconds": 30,
            "template": {
                "spec": {
                    "clusterName": "c1",
                    "bootstrap": {
                        "configRef": {
                            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
                            "kind": "KubeadmConfig",
                            "name": "old-bootstrap",
                            "namespace": namespace,
                        }
                    },
                    "infrastructureRef": {
                        "apiVersion": f"{INFRA_GROUP}/{INFRA_VERSION}",
                        "kind": INFRA_KIND,
                        "name": "old-infra",
                        "namespace": namespace,
                    },
                    "version": "v1.33.1",
                    "nodeDrainTimeout": "5m",
                    "nodeDeletionTimeout": "90s",
                }
            },
        },
    }


async def test_v1beta1_object_reads_back_as_v1beta2(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    await client.create(MACHINE_POOLS_V1BETA1, _v1beta1(namespace))
    hub = await client.get(MACHINE_POOLS, "old", namespace)
    spec = hub["spec"]["template"]["spec"]
    assert "minReadySeconds" not in hub["spec"]
    assert spec["minReadySeconds"] == 30
    assert spec["deletion"] == {"nodeDrainTimeoutSeconds": 300, "nodeDeletionTimeoutSeconds": 90}
    assert spec["bootstrap"]["configRef"] == {
        "apiGroup": "bootstrap.cluster.x-k8s.io",
        "kind": "KubeadmConfig",
        "name": "old-bootstrap",
    }
    assert spec["infrastructureRef"] == {
        "apiGroup": INFRA_GROUP,
        "kind": INFRA_KIND,
        "name": "old-infra",
    }
    assert hub["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "c1"

    # Read as v1beta1 again: what was written comes back, durations spelled as written.
    spoke = await client.get(MACHINE_POOLS_V1BETA1, "old", namespace)
    spoke_spec = spoke["spec"]["template"]["spec"]
    assert spoke["spec"]["minReadySeconds"] == 30
    assert spoke_spec["nodeDrainTimeout"] == "5m"
    assert spoke_spec["nodeDeletionTimeout"] == "90s"
    assert (
        spoke_spec["bootstrap"]["configRef"]["apiVersion"] == "bootstrap.cluster.x-k8s.io/v1beta2"
    )
    assert ANNOTATION not in spoke["metadata"].get("annotations", {})


async def test_v1beta2_object_reads_back_as_v1beta1(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    body = machine_pool(namespace, replicas=3)
    body["spec"]["template"]["spec"]["minReadySeconds"] = 12
    body["spec"]["template"]["spec"]["deletion"] = {"nodeDrainTimeoutSeconds": 90}
    await client.create(MACHINE_POOLS, body)
    status = {
        "status": {
            "replicas": 3,
            "readyReplicas": 2,
            "upToDateReplicas": 3,
            "initialization": {"bootstrapDataSecretCreated": True},
            "deprecated": {"v1beta1": {"readyReplicas": 1}},
            "phase": "ScalingUp",
        }
    }
    await client.patch(MACHINE_POOLS, "mp", status, namespace, subresource="status")

    spoke = await client.get(MACHINE_POOLS_V1BETA1, "mp", namespace)
    template_spec = spoke["spec"]["template"]["spec"]
    assert spoke["spec"]["minReadySeconds"] == 12
    assert template_spec["nodeDrainTimeout"] == "1m30s"
    assert template_spec["nodeDeletionTimeout"] == "10s"
    assert template_spec["infrastructureRef"] == {
        "apiVersion": f"{INFRA_GROUP}/{INFRA_VERSION}",  # from the CRD's contract label
        "kind": INFRA_KIND,
        "name": "mp-infra",
        "namespace": namespace,
    }
    assert spoke["status"]["bootstrapReady"] is True
    assert spoke["status"]["readyReplicas"] == 1
    assert spoke["status"]["v1beta2"] == {"readyReplicas": 2, "upToDateReplicas": 3}
    assert spoke["status"]["phase"] == "ScalingUp"

    # A v1beta1 client writes the object back unchanged: the v1beta2 object is unchanged too.
    before = await client.get(MACHINE_POOLS, "mp", namespace)
    await client.replace(MACHINE_POOLS_V1BETA1, spoke)
    after = await client.get(MACHINE_POOLS, "mp", namespace)
    assert after["spec"] == before["spec"]
    assert ANNOTATION not in after["metadata"].get("annotations", {})


async def test_v1beta1_list_converts_every_item(
    client: Client, namespace: str, webhooks: WebhookServer
) -> None:
    for name in ("a", "b"):
        await client.create(MACHINE_POOLS, machine_pool(namespace, name))
    listed = await client.list(MACHINE_POOLS_V1BETA1, namespace)
    assert sorted(item["metadata"]["name"] for item in listed.items) == ["a", "b"]
    assert {item["apiVersion"] for item in listed.items} == {"cluster.x-k8s.io/v1beta1"}
