"""Round trips of realistic upstream objects through the typed models of machinepool.api."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from machinepool.api import (
    Cluster,
    KubeadmConfig,
    Machine,
    MachinePool,
    V1Beta1MachinePool,
    format_time,
    model_for,
    parse_time,
)
from machinepool.api.meta import ADOPTION_GRACE_SECONDS, adoption_grace_left

UPSTREAM_MACHINE_POOL: dict[str, Any] = {
    "apiVersion": "cluster.x-k8s.io/v1beta2",
    "kind": "MachinePool",
    "metadata": {
        "name": "workers",
        "namespace": "default",
        "uid": "0f3c6b8e-1f6e-4c58-9d8a-6a6d2a1b9d21",
        "resourceVersion": "12345",
        "generation": 3,
        "creationTimestamp": "2025-05-01T10:00:00Z",
        "labels": {"cluster.x-k8s.io/cluster-name": "demo"},
        "annotations": {"cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "1"},
        "finalizers": ["machinepool.cluster.x-k8s.io"],
        "ownerReferences": [
            {
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "Cluster",
                "name": "demo",
                "uid": "9a1c",
            }
        ],
        "managedFields": [
            {
                "manager": "capi-controller",
                "operation": "Update",
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "time": "2025-05-01T10:00:01Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:replicas": {}}},
                "subresource": "status",
            }
        ],
    },
    "spec": {
        "clusterName": "demo",
        "replicas": 3,
        "template": {
            "metadata": {"labels": {"pool": "a"}, "annotations": {"note": "x"}},
            "spec": {
                "clusterName": "demo",
                "bootstrap": {
                    "configRef": {
                        "apiGroup": "bootstrap.cluster.x-k8s.io",
                        "kind": "KubeadmConfig",
                        "name": "workers",
                    },
                    "dataSecretName": "workers-abc12",
                },
                "infrastructureRef": {
                    "apiGroup": "infrastructure.cluster.x-k8s.io",
                    "kind": "DockerMachinePool",
                    "name": "workers",
                },
                "version": "v1.31.2",
                "minReadySeconds": 10,
                "deletion": {"nodeDeletionTimeoutSeconds": 10, "nodeDrainTimeoutSeconds": 0},
                "futureTemplateField": {"kept": True},
            },
        },
        "providerIDList": ["docker:////demo-workers-1", "docker:////demo-workers-2"],
        "failureDomains": ["fd-1"],
    },
    "status": {
        "conditions": [
            {
                "type": "Paused",
                "status": "False",
                "observedGeneration": 3,
                "lastTransitionTime": "2025-05-01T10:00:02Z",
                "reason": "NotPaused",
                "message": "",
            }
        ],
        "initialization": {"infrastructureProvisioned": True, "bootstrapDataSecretCreated": True},
        "nodeRefs": [
            {"apiVersion": "v1", "kind": "Node", "name": "demo-workers-1", "uid": "n1"},
        ],
        "replicas": 2,
        "readyReplicas": 1,
        "availableReplicas": 1,
        "upToDateReplicas": 2,
        "versions": [{"version": "v1.31.2", "replicas": 2}],
        "phase": "ScalingUp",
        "observedGeneration": 3,
        "deprecated": {
            "v1beta1": {
                "conditions": [
                    {
                        "type": "ReplicasReady",
                        "status": "False",
                        "severity": "Info",
                        "reason": "WaitingForReplicasReady",
                        "lastTransitionTime": "2025-05-01T10:00:02Z",
                    }
                ],
                "readyReplicas": 1,
                "availableReplicas": 1,
                "unavailableReplicas": 2,
            }
        },
        "someNewStatusField": [1, 2, 3],
    },
}


def test_machine_pool_round_trip_is_lossless() -> None:
    pool = MachinePool.from_dict(UPSTREAM_MACHINE_POOL)

    assert pool.to_dict() == UPSTREAM_MACHINE_POOL


def test_machine_pool_fields_are_typed() -> None:
    pool = MachinePool.from_dict(UPSTREAM_MACHINE_POOL)

    assert pool.spec.provider_id_list == ["docker:////demo-workers-1", "docker:////demo-workers-2"]
    ref = pool.spec.template.spec.bootstrap.config_ref
    assert ref is not None
    assert (ref.api_group, ref.kind, ref.name) == (
        "bootstrap.cluster.x-k8s.io",
        "KubeadmConfig",
        "workers",
    )
    assert pool.status is not None
    assert pool.status.deprecated is not None
    assert pool.status.deprecated.v1beta1 is not None
    assert pool.status.deprecated.v1beta1.unavailable_replicas == 2


def test_unset_fields_are_omitted() -> None:
    pool = MachinePool.from_dict(UPSTREAM_MACHINE_POOL)
    pool.status = None
    pool.spec.failure_domains = None

    data = pool.to_dict()

    assert "status" not in data
    assert "failureDomains" not in data["spec"]


def test_snake_case_names_are_accepted_too() -> None:
    data = copy.deepcopy(UPSTREAM_MACHINE_POOL)
    data["spec"]["provider_id_list"] = data["spec"].pop("providerIDList")

    pool = MachinePool.from_dict(data)

    assert (
        pool.to_dict()["spec"]["providerIDList"] == UPSTREAM_MACHINE_POOL["spec"]["providerIDList"]
    )


def test_upstream_bounds_are_enforced() -> None:
    data = copy.deepcopy(UPSTREAM_MACHINE_POOL)
    data["spec"]["clusterName"] = ""

    with pytest.raises(ValidationError):
        MachinePool.from_dict(data)


def test_v1beta1_machine_pool_round_trip() -> None:
    data = {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachinePool",
        "metadata": {"name": "workers", "namespace": "default"},
        "spec": {
            "clusterName": "demo",
            "replicas": 2,
            "minReadySeconds": 5,
            "template": {
                "spec": {
                    "clusterName": "demo",
                    "bootstrap": {
                        "configRef": {
                            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
                            "kind": "KubeadmConfig",
                            "name": "workers",
                            "namespace": "default",
                        }
                    },
                    "infrastructureRef": {
                        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                        "kind": "DockerMachinePool",
                        "name": "workers",
                    },
                    "version": "v1.31.2",
                    "nodeDrainTimeout": "10m",
                }
            },
        },
        "status": {
            "replicas": 0,
            "bootstrapReady": False,
            "infrastructureReady": False,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "severity": "Info",
                    "reason": "WaitingForInfrastructure",
                    "lastTransitionTime": "2025-05-01T10:00:00Z",
                }
            ],
            "v1beta2": {"readyReplicas": 0, "conditions": []},
        },
    }

    pool = V1Beta1MachinePool.from_dict(data)

    assert pool.to_dict() == data


def test_kubeadm_config_round_trip() -> None:
    data = {
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmConfig",
        "metadata": {"name": "workers", "namespace": "default"},
        "spec": {
            "format": "cloud-config",
            "files": [
                {"path": "/etc/a", "content": "x", "permissions": "0600", "encoding": "base64"},
                {"path": "/etc/b", "contentFrom": {"secret": {"name": "s", "key": "k"}}},
            ],
            "preKubeadmCommands": ["echo pre"],
            "users": [
                {
                    "name": "ops",
                    "sshAuthorizedKeys": ["ssh-ed25519 AAAA"],
                    "sudo": "ALL=(ALL) NOPASSWD:ALL",
                }
            ],
            "joinConfiguration": {
                "nodeRegistration": {
                    "kubeletExtraArgs": [{"name": "node-labels", "value": "pool=a"}],
                    "taints": [],
                },
                "discovery": {
                    "bootstrapToken": {
                        "token": "abcdef.0123456789abcdef",
                        "apiServerEndpoint": "10.0.0.1:6443",
                        "caCertHashes": ["sha256:00"],
                        "unsafeSkipCAVerification": False,
                    }
                },
                "timeouts": {"kubernetesAPICallSeconds": 60, "tlsBootstrapSeconds": 300},
            },
        },
        "status": {
            "initialization": {"dataSecretCreated": True},
            "dataSecretName": "workers",
            "ready": True,
            "observedGeneration": 1,
        },
    }

    config = KubeadmConfig.from_dict(data)

    assert config.to_dict() == data
    assert config.spec is not None
    assert config.spec.join_configuration is not None
    discovery = config.spec.join_configuration.discovery
    assert discovery is not None
    assert discovery.bootstrap_token is not None
    assert discovery.bootstrap_token.unsafe_skip_ca_verification is False


def test_cluster_and_machine_round_trip() -> None:
    cluster = {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": {
            "paused": False,
            "controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443},
            "topology": {"classRef": {"name": "quick-start"}, "version": "v1.31.2"},
        },
        "status": {
            "initialization": {"infrastructureProvisioned": True, "controlPlaneInitialized": True},
            "phase": "Provisioned",
        },
    }
    machine = {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {"name": "workers-1", "namespace": "default"},
        "spec": {
            "clusterName": "demo",
            "bootstrap": {"dataSecretName": ""},
            "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "DockerMachine",
                "name": "workers-1",
            },
            "providerID": "docker:////workers-1",
        },
        "status": {
            "nodeRef": {"name": "workers-1"},
            "nodeInfo": {"kubeletVersion": "v1.31.2", "machineID": "m", "systemUUID": "u"},
            "deletion": {"nodeDrainStartTime": "2025-05-01T10:00:00Z"},
        },
    }

    assert Cluster.from_dict(cluster).to_dict() == cluster
    assert Machine.from_dict(machine).to_dict() == machine


def test_model_for_finds_each_served_version() -> None:
    assert model_for("cluster.x-k8s.io/v1beta2", "MachinePool") is MachinePool
    assert model_for("cluster.x-k8s.io/v1beta1", "MachinePool") is V1Beta1MachinePool
    assert model_for("bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfig") is KubeadmConfig
    assert model_for("cluster.x-k8s.io/v1alpha1", "MachinePool") is None


def test_times_round_trip_in_apiserver_format() -> None:
    stamp = "2025-05-01T10:00:02Z"

    assert format_time(parse_time(stamp)) == stamp


def test_a_new_unowned_object_waits_the_adoption_grace_from_its_creation() -> None:
    created = {"metadata": {"creationTimestamp": "2025-05-01T10:00:00Z"}}
    at = parse_time("2025-05-01T10:00:04Z")

    assert adoption_grace_left(created, at) == ADOPTION_GRACE_SECONDS - 4
    assert adoption_grace_left(created, at + timedelta(seconds=60)) == 0
    assert adoption_grace_left({"metadata": {}}, at) == 0  # nothing to count from: say it now
    assert adoption_grace_left({"metadata": {"creationTimestamp": "not a time"}}, at) == 0


@pytest.mark.parametrize(
    ("field", "wire"),
    [
        ("provider_id_list", "providerIDList"),
        ("unsafe_skip_ca_verification", "unsafeSkipCAVerification"),
        ("kubernetes_api_call_seconds", "kubernetesAPICallSeconds"),
        ("v1beta1", "v1beta1"),
        ("api_group", "apiGroup"),
    ],
)
def test_wire_names_follow_kubernetes_spelling(field: str, wire: str) -> None:
    from machinepool.api.meta import camel

    assert camel(field) == wire
