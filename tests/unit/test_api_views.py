"""Typed views (``machinepool.api.views``) and contract accessors (``machinepool.api.contract``).

Views mirror the pydantic models the CRDs are generated from: these tests hold every view
field to its model's field name and JSON spelling, check that views read and write the very
dict the Patcher diffs, and that ``mypy --strict`` rejects a misspelt field.
"""

from __future__ import annotations

import copy
import inspect
import textwrap
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from mypy import api as mypy_api
from pydantic import BaseModel

from machinepool.api import contract, infra_aws, infra_sim, views
from machinepool.api.conditions import set_condition, set_v1beta1_condition
from machinepool.api.views import (
    AWSMachinePoolView,
    ClusterView,
    Field,
    KubeadmConfigView,
    MachinePoolView,
    MachineView,
    Nested,
    SimMachinePoolView,
    SimMachineView,
    View,
)
from machinepool.runtime.kube.patch import merge_patch

REPO = Path(__file__).resolve().parents[2]

VIEWS = [
    cls
    for _, cls in inspect.getmembers(views, inspect.isclass)
    if issubclass(cls, View) and "MODEL" in vars(cls)
]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model inside ``Annotated[Model | None, ...]``, if there is one."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _model_of(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        found = [m for a in typing.get_args(annotation) if (m := _model_of(a)) is not None]
        return found[0] if found else None
    is_model = isinstance(annotation, type) and issubclass(annotation, BaseModel)
    return annotation if is_model else None


def _fields(view: type[View]) -> dict[str, Field[Any] | Nested[Any]]:
    found: dict[str, Field[Any] | Nested[Any]] = {}
    for klass in reversed(view.__mro__):
        for name, attr in vars(klass).items():
            if isinstance(attr, (Field, Nested)):
                found[name] = attr
    return found


@pytest.mark.parametrize("view", VIEWS, ids=lambda v: v.__name__)
def test_every_view_field_is_its_models_field_spelt_as_on_the_wire(view: type[View]) -> None:
    model = view.MODEL
    for name, attr in _fields(view).items():
        assert name in model.model_fields, f"{view.__name__}.{name}: not a field of {model}"
        info = model.model_fields[name]
        assert attr.key == (info.alias or name), f"{view.__name__}.{name}"
        if isinstance(attr, Nested):
            assert _model_of(info.annotation) is attr.view.MODEL, f"{view.__name__}.{name}"


def test_views_cover_the_core_kinds() -> None:
    covered = {v.MODEL.__name__ for v in VIEWS}

    assert {"MachinePool", "Machine", "Cluster", "ObjectMeta", "KubeadmConfig"} <= covered


def _pool() -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"clusterName": "c", "replicas": 3, "template": {"spec": {}}},
        "status": {},
    }


def test_reading_creates_nothing() -> None:
    obj = _pool()
    before = copy.deepcopy(obj)
    pool = MachinePoolView(obj)

    assert pool.spec.replicas == 3
    assert pool.spec.provider_id_list is None
    assert pool.status.initialization.infrastructure_provisioned is None
    assert pool.spec.template.spec.bootstrap.config_ref.name is None
    assert pool.status.v1beta1.raw is None
    assert obj == before


def test_writes_land_in_the_dict_the_patcher_diffs() -> None:
    obj = _pool()
    snapshot = copy.deepcopy(obj)
    pool = MachinePoolView(obj)

    pool.spec.provider_id_list = ["x://1"]
    pool.status.initialization.infrastructure_provisioned = True
    pool.status.v1beta1.ready_replicas = 0 or None  # omitempty: a zero is left out
    pool.spec.replicas = None

    assert merge_patch(snapshot, obj) == {
        "spec": {"providerIDList": ["x://1"], "replicas": None},
        "status": {"initialization": {"infrastructureProvisioned": True}},
    }


def test_machine_views_read_through_absent_levels_and_write_the_same_dict() -> None:
    obj: dict[str, Any] = {
        "metadata": {"name": "m", "namespace": "ns", "finalizers": ["other"]},
        "spec": {"clusterName": "c", "infrastructureRef": {"kind": "SimMachine", "name": "m"}},
    }
    snapshot = copy.deepcopy(obj)
    machine = MachineView(obj)

    assert machine.status.node_ref.name is None
    assert machine.status.deletion.node_drain_start_time is None
    assert machine.status.v1beta1.conditions is None
    assert machine.spec.deletion.node_drain_timeout_seconds is None
    assert obj == snapshot, "reading created nothing"

    machine.status.node_ref.name = "n1"
    machine.status.deletion.wait_for_pre_drain_hook_start_time = "2025-01-01T00:00:00Z"
    machine.status.v1beta1.failure_reason = "InvalidConfiguration"
    machine.status.initialization.infrastructure_provisioned = True
    machine.status.phase = "Running"
    machine.metadata.finalizers = []

    assert merge_patch(snapshot, obj) == {
        "metadata": {"finalizers": []},
        "status": {
            "nodeRef": {"name": "n1"},
            "deletion": {"waitForPreDrainHookStartTime": "2025-01-01T00:00:00Z"},
            "deprecated": {"v1beta1": {"failureReason": "InvalidConfiguration"}},
            "initialization": {"infrastructureProvisioned": True},
            "phase": "Running",
        },
    }


def test_cluster_view_reads_pause_and_deletion() -> None:
    cluster = ClusterView(
        {"apiVersion": "cluster.x-k8s.io/v1beta2", "metadata": {"deletionTimestamp": "t"}}
    )

    assert (cluster.api_version, cluster.spec.paused, cluster.deleting) == (
        "cluster.x-k8s.io/v1beta2",
        None,
        True,
    )


def test_kubeadm_config_status_and_cluster_readiness_through_views() -> None:
    obj: dict[str, Any] = {"metadata": {"name": "cfg", "uid": "u"}, "spec": {}}
    snapshot = copy.deepcopy(obj)
    config = KubeadmConfigView(obj)

    assert config.status.initialization.data_secret_created is None
    assert config.status.v1beta1.conditions is None
    assert obj == snapshot
    config.status.data_secret_name = "cfg"
    config.status.initialization.data_secret_created = True
    config.status.ready = True

    assert merge_patch(snapshot, obj) == {
        "status": {
            "dataSecretName": "cfg",
            "initialization": {"dataSecretCreated": True},
            "ready": True,
        }
    }
    cluster = ClusterView(
        {
            "spec": {"controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443}},
            "status": {"initialization": {"controlPlaneInitialized": True}},
        }
    )
    endpoint = cluster.spec.control_plane_endpoint
    assert (endpoint.host, endpoint.port) == ("10.0.0.1", 6443)
    assert cluster.status.initialization.control_plane_initialized is True
    assert cluster.status.initialization.infrastructure_provisioned is None


def test_the_pool_engines_kinds_through_views() -> None:
    obj: dict[str, Any] = {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "kind": "SimMachinePool",
        "metadata": {"name": "p", "namespace": "ns", "finalizers": ["f"]},
        "spec": {"template": {"image": "i"}},
    }
    snapshot = copy.deepcopy(obj)
    pool = SimMachinePoolView(obj)

    assert (pool.status.ready, pool.status.initialization, pool.spec.provider_id_list) == (
        None,
        None,
        None,
    )
    pool.spec.provider_id_list = ["sim:///ns/i-1"]
    pool.status.replicas = 1
    pool.status.initialization = {"provisioned": True}
    pool.metadata.finalizers = None

    assert merge_patch(snapshot, obj) == {
        "metadata": {"finalizers": None},
        "spec": {"providerIDList": ["sim:///ns/i-1"]},
        "status": {"replicas": 1, "initialization": {"provisioned": True}},
    }
    machine = SimMachineView({"metadata": {"name": "i-1"}, "spec": {"instanceID": "i-1"}})
    assert (machine.spec.instance_id, machine.status.conditions, machine.deleting) == (
        "i-1",
        None,
        False,
    )


def test_aws_machine_pool_status_through_its_view() -> None:
    obj: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {"minSize": 1}}
    snapshot = copy.deepcopy(obj)
    pool = AWSMachinePoolView(obj)

    assert (pool.status.asg_name, pool.status.launch_template_id) == (None, None)
    assert obj == snapshot
    pool.status.asg_name = "p"
    pool.status.launch_template_id = "lt-1"
    pool.status.asg_status = None  # omitempty: nothing written

    assert merge_patch(snapshot, obj) == {"status": {"asgName": "p", "launchTemplateID": "lt-1"}}


def test_a_view_follows_a_replaced_sub_object() -> None:
    obj = _pool()
    pool = MachinePoolView(obj)
    status = pool.status

    obj["status"] = {"replicas": 2}

    assert status.replicas == 2


def test_contract_reads_either_contract_version_and_tolerates_odd_shapes() -> None:
    v1beta1 = contract.InfraMachinePool({"status": {"ready": True, "replicas": 2}})
    v1beta2 = contract.InfraMachinePool({"status": {"initialization": {"provisioned": True}}})
    odd = contract.InfraMachinePool({"spec": {"providerIDList": "x://1"}, "status": "ready"})

    assert v1beta1.provisioned
    assert v1beta2.provisioned
    assert (v1beta1.replicas, v1beta2.replicas) == (2, None)
    assert (odd.provisioned, odd.provider_id_list, odd.replicas) == (False, [], None)
    assert odd.infrastructure_machine_kind == ""


def test_contract_bootstrap_config_and_failures() -> None:
    config = contract.BootstrapConfig(
        {
            "metadata": {"name": "cfg"},
            "status": {
                "initialization": {"dataSecretCreated": True},
                "dataSecretName": "cfg-data",
                "deprecated": {"v1beta1": {"failureReason": "Broken"}},
            },
        }
    )

    assert config.data_secret_created
    assert config.data_secret_name == "cfg-data"
    assert (config.failure_reason, config.failure_message) == ("Broken", "")
    assert not contract.BootstrapConfig({"status": {"ready": "true"}}).data_secret_created


def test_a_referenced_failure_is_described_in_upstreams_words() -> None:
    machine = contract.InfraMachine(
        {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "TestMachine",
            "metadata": {"name": "m-0"},
            "status": {"failureReason": "CreateError", "failureMessage": "quota " * 3000},
        }
    )

    text = machine.failure_detected()
    assert text.startswith(
        "Failure detected from referenced resource infrastructure.cluster.x-k8s.io/v1beta1,"
        ' Kind=TestMachine with name "m-0": quota quota'
    )
    # The v1beta1 schemas' limit: a longer message would fail the whole status write.
    assert len(text) == 10240


def test_a_v1beta1_condition_in_status_conditions_is_not_the_ready_condition() -> None:
    ready = {"type": "Ready", "status": "False", "severity": "Error"}
    obj = contract.InfraMachinePool({"status": {"conditions": [ready]}})

    assert obj.ready_condition is None
    assert obj.v1beta1_ready_condition == ready


SNIPPET = """
from machinepool.api.contract import InfraMachinePool
from machinepool.api.views import MachinePoolView, MachineView


def misspelt(pool: MachinePoolView, infra: InfraMachinePool, machine: MachineView) -> None:
    pool.spec.replica = 3
    print(pool.status.initialization.infrastructureProvisioned)
    pool.status.ready_replicas = "3"
    print(infra.provider_ids)
    print(machine.status.deletion.nodeDrainStartTime)


def spelt_right(pool: MachinePoolView, infra: InfraMachinePool) -> int:
    pool.spec.provider_id_list = infra.provider_id_list
    return pool.status.ready_replicas or 0
"""


@pytest.mark.timeout(300)
def test_mypy_strict_rejects_a_misspelt_field(tmp_path: Path) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(textwrap.dedent(SNIPPET))

    out, err, status = mypy_api.run(
        [
            "--strict",
            "--config-file",
            str(REPO / "pyproject.toml"),
            "--cache-dir",
            str(REPO / ".mypy_cache"),
            str(snippet),
        ]
    )

    assert status == 1, err or out
    # (line in the snippet, error code, what the message names); wording varies by version.
    found = [
        (int(line.split(":")[1]), line.rsplit("[", 1)[1].rstrip("]"), line)
        for line in out.splitlines()
        if ": error: " in line
    ]
    expected = [
        (7, "attr-defined", '"replica"'),
        (8, "attr-defined", '"infrastructureProvisioned"'),
        (9, "assignment", '"str"'),
        (10, "attr-defined", '"provider_ids"'),
        (11, "attr-defined", '"nodeDrainStartTime"'),
    ]
    assert [(n, code) for n, code, _ in found] == [(n, code) for n, code, _ in expected], out
    for (_, _, line), (_, _, name) in zip(found, expected, strict=True):
        assert name in line


def test_conditions_are_created_by_editing_only_and_set_in_the_stored_list() -> None:
    obj: dict[str, Any] = {"metadata": {"name": "mp"}}
    mp = MachinePoolView(obj)

    assert mp.status.conditions is None
    assert mp.status.v1beta1.conditions is None
    assert obj == {"metadata": {"name": "mp"}}, "reading conditions created something"

    set_condition(mp.status.edit_conditions(), "Paused", False, "NotPaused")
    set_v1beta1_condition(mp.status.v1beta1.edit_conditions(), "Ready", True)

    assert [cond["type"] for cond in obj["status"]["conditions"]] == ["Paused"]
    assert obj["status"]["deprecated"]["v1beta1"]["conditions"][0]["status"] == "True"
    assert mp.status.edit_conditions() is obj["status"]["conditions"]


def test_views_of_kubernetes_kinds_read_the_keys_the_kubernetes_api_spells() -> None:
    node = views.NodeView(
        {
            "metadata": {"name": "n1", "resourceVersion": "7"},
            "spec": {"providerID": "sim:///a/i-1", "unschedulable": True, "taints": [{}]},
            "status": {
                "nodeInfo": {"kubeletVersion": "v1.34.4"},
                "volumesAttached": [{"name": "v"}],
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    attachment = views.VolumeAttachmentView(
        {
            "spec": {"nodeName": "n1", "source": {"persistentVolumeName": "pv1"}},
            "status": {"attached": True},
        }
    )
    volume = views.PersistentVolumeView({"spec": {"csi": {}, "claimRef": {"name": "c"}}})
    pod = views.PodView({"spec": {"volumes": [{"name": "data"}]}})

    assert node.metadata.resource_version == "7"
    assert node.spec.provider_id == "sim:///a/i-1"
    assert node.spec.unschedulable is True
    assert node.spec.taints == [{}]
    assert node.status.node_info.kubelet_version == "v1.34.4"
    assert node.status.volumes_attached == [{"name": "v"}]
    assert node.status.conditions == [{"type": "Ready", "status": "True"}]
    assert attachment.spec.node_name == "n1"
    assert attachment.spec.source.persistent_volume_name == "pv1"
    assert attachment.status.attached is True
    assert volume.spec.csi == {}
    assert volume.spec.claim_ref == {"name": "c"}
    assert pod.spec.volumes == [{"name": "data"}]


@pytest.mark.parametrize(
    ("entry", "model"),
    [
        (views.EngineInstanceEntry, infra_sim.SimInstanceStatus),
        (views.AWSInstanceEntry, infra_aws.AWSMachinePoolInstanceStatus),
    ],
    ids=lambda v: v.__name__,
)
def test_status_instance_entries_have_the_keys_their_model_writes(
    entry: type[Any], model: type[BaseModel]
) -> None:
    wire = {info.alias or name for name, info in model.model_fields.items()}

    assert set(typing.get_type_hints(entry)) == wire
