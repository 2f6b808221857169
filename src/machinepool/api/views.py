"""Typed views of our own kinds over their raw JSON: ``MachinePoolView(obj).spec.replicas``.

Controllers read objects from informer caches and write them back through ``runtime.Patcher``
as plain dicts. A view gives such a dict typed, named fields without copying or validating
it: ``pool.spec.provider_id_list`` is the list stored at ``obj["spec"]["providerIDList"]``,
typed ``list[str] | None``, and ``pool.spec.provider_ids`` is an error ``mypy --strict``
reports. Assigning through a view writes into the same dict, so the Patcher's snapshot and
merge patch see every change as before. Why views rather than generated TypedDicts, and what
they cost: docs/architecture.md, "Typed access to objects".

Each view names the pydantic model it mirrors (``MODEL``); a field takes the model's field
name and its JSON spelling comes from the models' own alias generator, so a view cannot
spell a field differently from the CRD (tests/unit/test_api_views.py holds every view to its
model). Views cover what the controllers use, not every field: add one when a controller
needs it.

Objects referenced by contract (bootstrap configs, infra pools of any provider) are not
ours to type this way: ``machinepool.api.contract`` reads them. Kubernetes' own kinds that
the controllers read (Node, Pod, PersistentVolume, VolumeAttachment) have views at the end,
with no model behind them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Generic, Self, TypedDict, TypeVar, cast, overload

from machinepool.api import bootstrap_v1beta2 as bootstrap
from machinepool.api import core_v1beta2 as v1beta2
from machinepool.api import drainrule, healthcheck, infra_aws, infra_sim
from machinepool.api.conditions import Condition
from machinepool.api.meta import (
    ContractVersionedObjectReference,
    K8sModel,
    ObjectMeta,
    TemplateMeta,
    camel,
    dig,
    ensure,
)

__all__ = [
    "AMIReferenceView",
    "APIEndpointView",
    "AWSInstanceEntry",
    "AWSLaunchTemplateView",
    "AWSMachinePoolSpecView",
    "AWSMachinePoolStatusView",
    "AWSMachinePoolView",
    "AWSMachineSpecView",
    "AWSMachineStatusView",
    "AWSMachineView",
    "BootstrapView",
    "ClusterInitializationView",
    "ClusterSpecView",
    "ClusterStatusView",
    "ClusterView",
    "ConditionsView",
    "EngineInstanceEntry",
    "EngineMachineSpecView",
    "EngineMachineStatusView",
    "EngineMachineView",
    "EnginePoolSpecView",
    "EnginePoolStatusView",
    "EnginePoolView",
    "Field",
    "KubeadmConfigInitializationView",
    "KubeadmConfigStatusView",
    "KubeadmConfigV1Beta1View",
    "KubeadmConfigView",
    "MachineDeletionStatusView",
    "MachineDeletionView",
    "MachineDrainRuleDrainView",
    "MachineDrainRuleSpecView",
    "MachineDrainRuleView",
    "MachineHealthCheckChecksView",
    "MachineHealthCheckRemediationView",
    "MachineHealthCheckSpecView",
    "MachineHealthCheckStatusView",
    "MachineHealthCheckTemplateRefView",
    "MachineHealthCheckTriggerIfView",
    "MachineHealthCheckV1Beta1View",
    "MachineHealthCheckView",
    "MachineInitializationView",
    "MachineNodeReferenceView",
    "MachinePoolInitializationView",
    "MachinePoolSpecView",
    "MachinePoolStatusView",
    "MachinePoolV1Beta1View",
    "MachinePoolView",
    "MachineSpecView",
    "MachineStatusView",
    "MachineTemplateView",
    "MachineV1Beta1View",
    "MachineView",
    "MixedInstancesPolicyView",
    "Nested",
    "NodeInfoView",
    "NodeSpecView",
    "NodeStatusView",
    "NodeView",
    "ObjectMetaView",
    "ObjectView",
    "PersistentVolumeSpecView",
    "PersistentVolumeView",
    "PodSpecView",
    "PodView",
    "ReferenceView",
    "RefreshPreferencesView",
    "SimMachinePoolSpecView",
    "SimMachinePoolStatusView",
    "SimMachinePoolView",
    "SimMachineSpecView",
    "SimMachineStatusView",
    "SimMachineView",
    "SimSettingsView",
    "SimTemplateView",
    "SimWarmPoolView",
    "TemplateMetaView",
    "View",
    "VolumeAttachmentSourceView",
    "VolumeAttachmentSpecView",
    "VolumeAttachmentStatusView",
    "VolumeAttachmentView",
]

_T = TypeVar("_T")
_V = TypeVar("_V", bound="View", covariant=True)
"""Covariant: a kind's view may narrow an inherited sub-view (``SimMachinePoolView.spec``)."""
_ABSENT: Mapping[str, Any] = MappingProxyType({})


class View:
    """A typed window onto the dict at ``path`` inside the raw object ``root``.

    Reading never creates anything: a step that is missing (or not a dict) reads as absent,
    as ``meta.dig`` does. Writing creates the path on the way, as ``meta.ensure`` does. The
    path is walked from the root on every access, so a view stays right when a phase
    replaces a whole sub-object.
    """

    __slots__ = ("_path", "_root")
    MODEL: ClassVar[type[K8sModel]]
    """The model whose fields this view mirrors."""

    def __init__(self, root: dict[str, Any], path: tuple[str, ...] = ()) -> None:
        self._root = root
        self._path = path

    @property
    def raw(self) -> dict[str, Any] | None:
        """The dict this view reads, as stored (``None`` when absent), for code that works
        on raw JSON: copying a sub-object whole, or telling ``{}`` from nothing."""
        holder = self._holder()
        return holder if isinstance(holder, dict) else None

    def _holder(self) -> Mapping[str, Any]:
        holder = dig(self._root, *self._path) if self._path else self._root
        return holder if isinstance(holder, dict) else _ABSENT

    def _ensure(self) -> dict[str, Any]:
        return ensure(self._root, *self._path)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({'.'.join(self._path) or '<root>'})"


class Field(Generic[_T]):
    """One JSON field of a view: ``replicas = Field[int | None]()``.

    The attribute name is the model's field name, and the JSON key is what the models' alias
    generator makes of it (``provider_id_list`` -> ``providerIDList``). Reading gives the
    stored value, unchecked: the apiserver validated it against the CRD generated from the
    same model. An absent field reads as ``None`` (so ``_T`` includes ``None`` for fields the
    model makes optional). A field the model requires is typed without ``None``, as the
    apiserver stores no object without it; read through an optional parent that is absent
    (a ``configRef`` that is not set) it is ``None`` all the same, so test the parent first
    (``if ref.name:``). Assigning sets it; assigning ``None`` removes the key, as Go's
    ``omitempty`` leaves an unset field out.

    ``key`` is for the rare model field whose alias is set by hand, not generated
    (``imageLookupBaseOS``); the view test holds it to that alias all the same.
    """

    def __init__(self, key: str = "") -> None:
        self.name, self.key = "", key

    def __set_name__(self, owner: type[View], name: str) -> None:
        self.name, self.key = name, self.key or camel(name)

    @overload
    def __get__(self, view: None, owner: type[View]) -> Self: ...
    @overload
    def __get__(self, view: View, owner: type[View]) -> _T: ...
    def __get__(self, view: View | None, owner: type[View]) -> Self | _T:
        if view is None:
            return self
        # Trusted, not checked: see the class docstring.
        return cast(_T, view._holder().get(self.key))

    def __set__(self, view: View, value: _T) -> None:
        if value is not None:
            view._ensure()[self.key] = value
            return
        holder = view._holder()
        if isinstance(holder, dict):
            holder.pop(self.key, None)


class Nested(Generic[_V]):
    """A sub-object of a view, itself a view: ``spec = Nested(MachinePoolSpecView)``.

    Reading it creates nothing; the sub-object appears in the raw dict when a field of it
    is first assigned.
    """

    def __init__(self, view: type[_V]) -> None:
        self.view = view
        self.name = self.key = ""

    def __set_name__(self, owner: type[View], name: str) -> None:
        self.name, self.key = name, camel(name)

    @overload
    def __get__(self, view: None, owner: type[View]) -> Self: ...
    @overload
    def __get__(self, view: View, owner: type[View]) -> _V: ...
    def __get__(self, view: View | None, owner: type[View]) -> Self | _V:
        if view is None:
            return self
        return self.view(view._root, (*view._path, self.key))


class ConditionsView(View):
    """A status, or its ``deprecated.v1beta1`` group, that holds a ``conditions`` list.

    Reading ``conditions`` creates nothing (an object without conditions is patched with
    none); ``edit_conditions()`` is the one place the list is created, for the setters of
    ``machinepool.api.conditions`` to change in place.
    """

    conditions = Field[list[Condition] | None]()

    def edit_conditions(self) -> list[Condition]:
        """The stored ``conditions`` list, created empty when missing (or not a list)."""
        listed = self.conditions
        if not isinstance(listed, list):
            listed = self.conditions = []
        return listed


# --- metadata and references ---------------------------------------------------------------


class ObjectMetaView(View):
    """``metadata``; the lists are the stored ones, so appending to them writes the object."""

    MODEL = ObjectMeta
    name = Field[str]()
    namespace = Field[str]()
    uid = Field[str]()
    resource_version = Field[str]()
    generation = Field[int | None]()
    creation_timestamp = Field[str | None]()
    deletion_timestamp = Field[str | None]()
    labels = Field[dict[str, str] | None]()
    annotations = Field[dict[str, str] | None]()
    owner_references = Field[list[dict[str, Any]] | None]()
    finalizers = Field[list[str] | None]()


class TemplateMetaView(View):
    MODEL = TemplateMeta
    labels = Field[dict[str, str] | None]()
    annotations = Field[dict[str, str] | None]()


class ReferenceView(View):
    """A ``{apiGroup, kind, name}`` reference; its version comes from the CRD's contract label."""

    MODEL = ContractVersionedObjectReference
    api_group = Field[str]()
    kind = Field[str]()
    name = Field[str]()


class ObjectView(View):
    """A whole object; its ``metadata`` reads the same in every kind."""

    metadata = Nested(ObjectMetaView)

    def __init__(self, obj: dict[str, Any]) -> None:
        super().__init__(obj)

    @property
    def raw(self) -> dict[str, Any]:
        """The object itself, for what works on raw objects (patches, events, conditions)."""
        return self._root

    @property
    def deleting(self) -> bool:
        return bool(self.metadata.deletion_timestamp)


# --- MachinePool and Machine ----------------------------------------------------------------


class BootstrapView(View):
    MODEL = v1beta2.Bootstrap
    config_ref = Nested(ReferenceView)
    data_secret_name = Field[str | None]()


class MachineDeletionView(View):
    MODEL = v1beta2.MachineDeletionSpec
    node_drain_timeout_seconds = Field[int | None]()
    node_volume_detach_timeout_seconds = Field[int | None]()
    node_deletion_timeout_seconds = Field[int | None]()


class MachineSpecView(View):
    """A Machine's spec, or the template spec of every machine of a pool."""

    MODEL = v1beta2.MachineSpec
    cluster_name = Field[str]()
    bootstrap = Nested(BootstrapView)
    infrastructure_ref = Nested(ReferenceView)
    version = Field[str | None]()
    provider_id = Field[str | None]()
    failure_domain = Field[str | None]()
    min_ready_seconds = Field[int | None]()
    deletion = Nested(MachineDeletionView)
    taints = Field[list[dict[str, Any]] | None]()


class MachineTemplateView(View):
    MODEL = v1beta2.MachineTemplateSpec
    metadata = Nested(TemplateMetaView)
    spec = Nested(MachineSpecView)


class MachinePoolSpecView(View):
    MODEL = v1beta2.MachinePoolSpec
    cluster_name = Field[str]()
    replicas = Field[int | None]()
    template = Nested(MachineTemplateView)
    provider_id_list = Field[list[str] | None]()
    failure_domains = Field[list[str] | None]()


class MachinePoolInitializationView(View):
    MODEL = v1beta2.MachinePoolInitializationStatus
    infrastructure_provisioned = Field[bool | None]()
    bootstrap_data_secret_created = Field[bool | None]()


class MachinePoolV1Beta1View(ConditionsView):
    """``status.deprecated.v1beta1``: what v1beta1 clients still read."""

    MODEL = v1beta2.MachinePoolV1Beta1DeprecatedStatus
    failure_reason = Field[str | None]()
    failure_message = Field[str | None]()
    ready_replicas = Field[int | None]()
    available_replicas = Field[int | None]()
    unavailable_replicas = Field[int | None]()


class _MachinePoolDeprecatedView(View):
    MODEL = v1beta2.MachinePoolDeprecatedStatus
    v1beta1 = Nested(MachinePoolV1Beta1View)


class MachinePoolStatusView(ConditionsView):
    MODEL = v1beta2.MachinePoolStatus
    initialization = Nested(MachinePoolInitializationView)
    node_refs = Field[list[dict[str, Any]] | None]()
    replicas = Field[int | None]()
    ready_replicas = Field[int | None]()
    available_replicas = Field[int | None]()
    up_to_date_replicas = Field[int | None]()
    versions = Field[list[dict[str, Any]] | None]()
    phase = Field[v1beta2.MachinePoolPhase | None]()
    observed_generation = Field[int | None]()
    deprecated = Nested(_MachinePoolDeprecatedView)

    @property
    def v1beta1(self) -> MachinePoolV1Beta1View:
        """``status.deprecated.v1beta1``, the one deprecated group there is."""
        return self.deprecated.v1beta1


class MachinePoolView(ObjectView):
    """A MachinePool: ``cluster.x-k8s.io/v1beta2``, the hub version."""

    MODEL = v1beta2.MachinePool
    api_version = Field[str]()
    spec = Nested(MachinePoolSpecView)
    status = Nested(MachinePoolStatusView)


class NodeInfoView(View):
    MODEL = v1beta2.NodeSystemInfo
    kubelet_version = Field[str | None]()


class MachineNodeReferenceView(View):
    MODEL = v1beta2.MachineNodeReference
    name = Field[str]()


class MachineInitializationView(View):
    MODEL = v1beta2.MachineInitializationStatus
    infrastructure_provisioned = Field[bool | None]()


class MachineDeletionStatusView(View):
    """``status.deletion``: when each wait of a deletion began (timestamps as stored)."""

    MODEL = v1beta2.MachineDeletionStatus
    node_drain_start_time = Field[str | None]()
    wait_for_node_volume_detach_start_time = Field[str | None]()
    wait_for_pre_drain_hook_start_time = Field[str | None]()
    wait_for_pre_terminate_hook_start_time = Field[str | None]()


class MachineV1Beta1View(ConditionsView):
    """``status.deprecated.v1beta1`` of a Machine."""

    MODEL = v1beta2.MachineV1Beta1DeprecatedStatus
    failure_reason = Field[str | None]()
    failure_message = Field[str | None]()


class _MachineDeprecatedView(View):
    MODEL = v1beta2.MachineDeprecatedStatus
    v1beta1 = Nested(MachineV1Beta1View)


class MachineStatusView(ConditionsView):
    MODEL = v1beta2.MachineStatus
    initialization = Nested(MachineInitializationView)
    node_ref = Nested(MachineNodeReferenceView)
    node_info = Nested(NodeInfoView)
    addresses = Field[list[dict[str, Any]] | None]()
    failure_domain = Field[str | None]()
    phase = Field[v1beta2.MachinePhase | None]()
    deletion = Nested(MachineDeletionStatusView)
    deprecated = Nested(_MachineDeprecatedView)

    @property
    def v1beta1(self) -> MachineV1Beta1View:
        """``status.deprecated.v1beta1``, the one deprecated group there is."""
        return self.deprecated.v1beta1


class MachineView(ObjectView):
    MODEL = v1beta2.Machine
    spec = Nested(MachineSpecView)
    status = Nested(MachineStatusView)


class APIEndpointView(View):
    MODEL = v1beta2.APIEndpoint
    host = Field[str | None]()
    port = Field[int | None]()


class ClusterSpecView(View):
    MODEL = v1beta2.ClusterSpec
    paused = Field[bool | None]()
    control_plane_endpoint = Nested(APIEndpointView)
    control_plane_ref = Nested(ReferenceView)


class ClusterInitializationView(View):
    MODEL = v1beta2.ClusterInitializationStatus
    infrastructure_provisioned = Field[bool | None]()
    control_plane_initialized = Field[bool | None]()


class ClusterStatusView(ConditionsView):
    MODEL = v1beta2.ClusterStatus
    initialization = Nested(ClusterInitializationView)


class ClusterView(ObjectView):
    MODEL = v1beta2.Cluster
    api_version = Field[str]()
    spec = Nested(ClusterSpecView)
    status = Nested(ClusterStatusView)


# --- MachineHealthCheck (cluster.x-k8s.io) ---------------------------------------------------


class MachineHealthCheckChecksView(View):
    MODEL = healthcheck.MachineHealthCheckChecks
    node_startup_timeout_seconds = Field[int | None]()
    unhealthy_node_conditions = Field[list[dict[str, Any]] | None]()
    unhealthy_machine_conditions = Field[list[dict[str, Any]] | None]()


class MachineHealthCheckTriggerIfView(View):
    MODEL = healthcheck.MachineHealthCheckRemediationTriggerIf
    unhealthy_less_than_or_equal_to = Field[int | str | None]()
    unhealthy_in_range = Field[str | None]()


class MachineHealthCheckTemplateRefView(View):
    MODEL = healthcheck.MachineHealthCheckRemediationTemplateReference
    kind = Field[str]()
    name = Field[str]()
    api_version = Field[str]()


class MachineHealthCheckRemediationView(View):
    MODEL = healthcheck.MachineHealthCheckRemediation
    trigger_if = Nested(MachineHealthCheckTriggerIfView)
    template_ref = Nested(MachineHealthCheckTemplateRefView)


class MachineHealthCheckSpecView(View):
    MODEL = healthcheck.MachineHealthCheckSpec
    cluster_name = Field[str]()
    selector = Field[dict[str, Any]]()
    """A ``metav1.LabelSelector`` as stored, for ``selector.matches``."""
    checks = Nested(MachineHealthCheckChecksView)
    remediation = Nested(MachineHealthCheckRemediationView)


class MachineHealthCheckV1Beta1View(ConditionsView):
    """``status.deprecated.v1beta1`` of a MachineHealthCheck."""

    MODEL = healthcheck.MachineHealthCheckV1Beta1DeprecatedStatus


class _MachineHealthCheckDeprecatedView(View):
    MODEL = healthcheck.MachineHealthCheckDeprecatedStatus
    v1beta1 = Nested(MachineHealthCheckV1Beta1View)


class MachineHealthCheckStatusView(ConditionsView):
    MODEL = healthcheck.MachineHealthCheckStatus
    expected_machines = Field[int | None]()
    current_healthy = Field[int | None]()
    remediations_allowed = Field[int | None]()
    observed_generation = Field[int | None]()
    targets = Field[list[str] | None]()
    deprecated = Nested(_MachineHealthCheckDeprecatedView)

    @property
    def v1beta1(self) -> MachineHealthCheckV1Beta1View:
        """``status.deprecated.v1beta1``, the one deprecated group there is."""
        return self.deprecated.v1beta1


class MachineHealthCheckView(ObjectView):
    """A MachineHealthCheck: ``cluster.x-k8s.io/v1beta2``."""

    MODEL = healthcheck.MachineHealthCheck
    spec = Nested(MachineHealthCheckSpecView)
    status = Nested(MachineHealthCheckStatusView)


# --- KubeadmConfig (bootstrap.cluster.x-k8s.io) ---------------------------------------------
# Its spec is read through the model (the bootstrap controller parses it whole to render the
# join); its status is written through these.


class KubeadmConfigInitializationView(View):
    MODEL = bootstrap.KubeadmConfigInitializationStatus
    data_secret_created = Field[bool | None]()


class KubeadmConfigV1Beta1View(ConditionsView):
    """``status.deprecated.v1beta1`` of a KubeadmConfig."""

    MODEL = bootstrap.KubeadmConfigV1Beta1DeprecatedStatus


class _KubeadmConfigDeprecatedView(View):
    MODEL = bootstrap.KubeadmConfigDeprecatedStatus
    v1beta1 = Nested(KubeadmConfigV1Beta1View)


class KubeadmConfigStatusView(ConditionsView):
    MODEL = bootstrap.KubeadmConfigStatus
    initialization = Nested(KubeadmConfigInitializationView)
    data_secret_name = Field[str | None]()
    ready = Field[bool | None]()
    deprecated = Nested(_KubeadmConfigDeprecatedView)

    @property
    def v1beta1(self) -> KubeadmConfigV1Beta1View:
        """``status.deprecated.v1beta1``, the one deprecated group there is."""
        return self.deprecated.v1beta1


class KubeadmConfigView(ObjectView):
    """A KubeadmConfig: ``bootstrap.cluster.x-k8s.io/v1beta2``."""

    MODEL = bootstrap.KubeadmConfig
    status = Nested(KubeadmConfigStatusView)


# --- the pool engine's infra-pool contract, and the Sim kinds that implement it ---------------
# The pool engine (providers/pool) reads and writes an infra pool and its infra machines only
# through the Engine* views: the fields every engine-driven kind has (the Cluster API infra
# pool contract's, plus the engine's instance list). A provider plugging into the engine
# declares its kinds' views (``PoolProvider.pool_view`` and ``machine_view``), subclasses of
# these that add its own settings; the Sim kinds are the one such provider here, and the Sim
# provider (providers/sim) reads its settings (spec.template, spec.sim, spec.warmPool)
# through them. Each subclass names its model, and the view test holds every inherited field
# to that model, so a kind that lacks an engine field cannot declare the view.


class EngineInstanceEntry(TypedDict, total=False):
    """One entry of an engine-driven pool's ``status.instances`` (or ``warmInstances``), as
    stored: for the Sim kinds, the JSON of ``infra_sim.SimInstanceStatus`` (the view test
    holds the keys to it)."""

    instanceID: str
    providerID: str
    failureDomain: str
    state: str
    version: str
    upToDate: bool


class EnginePoolSpecView(View):
    """What the engine reads and writes of an infra pool's spec."""

    provider_id_list = Field[list[str] | None]()
    strategy = Field[dict[str, Any] | None]()
    """As stored, for the pool engine's strategy parsing."""


class EnginePoolStatusView(ConditionsView):
    """What the engine reports in an infra pool's status."""

    ready = Field[bool | None]()
    replicas = Field[int | None]()
    instances = Field[list[EngineInstanceEntry] | None]()
    warm_instances = Field[list[EngineInstanceEntry] | None]()
    infrastructure_machine_kind = Field[str | None]()
    capacity = Field[dict[str, str] | None]()
    initialization = Field[dict[str, bool] | None]()
    """``{"provisioned": true}`` once provisioned: a free-form map in the model."""


class EnginePoolView(ObjectView):
    """An infra pool the pool engine drives, of whichever provider declared it."""

    api_version = Field[str]()
    spec = Nested(EnginePoolSpecView)
    status = Nested(EnginePoolStatusView)


class EngineMachineSpecView(View):
    provider_id = Field[str | None]()
    instance_id = Field[str | None]()
    failure_domain = Field[str | None]()


class EngineMachineStatusView(ConditionsView):
    ready = Field[bool | None]()
    instance_state = Field[str | None]()
    initialization = Field[dict[str, bool] | None]()


class EngineMachineView(ObjectView):
    """An infra machine the pool engine keeps, one per instance."""

    spec = Nested(EngineMachineSpecView)
    status = Nested(EngineMachineStatusView)


class SimTemplateView(View):
    MODEL = infra_sim.SimTemplate
    instance_type = Field[str | None]()
    image = Field[str | None]()


class SimSettingsView(View):
    """``spec.sim``: the simulated cloud's behaviour for this pool (all optional)."""

    MODEL = infra_sim.SimSettings
    boot_delay_seconds = Field[int | None]()
    boot_delay_spread_seconds = Field[int | None]()
    boot_failure_rate = Field[float | None]()
    fail_after_boot_rate = Field[float | None]()
    fail_after_boot_within_seconds = Field[int | None]()
    capacity_per_failure_domain = Field[int | None]()
    start_delay_seconds = Field[int | None]()


class SimWarmPoolView(View):
    """``spec.warmPool``: instances booted and stopped ahead of a scale-up."""

    MODEL = infra_sim.SimWarmPool
    min_size = Field[int | None]()
    max_group_prepared_capacity = Field[int | None]()


class SimMachinePoolSpecView(EnginePoolSpecView):
    MODEL = infra_sim.SimMachinePoolSpec
    template = Nested(SimTemplateView)
    sim = Nested(SimSettingsView)
    warm_pool = Nested(SimWarmPoolView)


class SimMachinePoolStatusView(EnginePoolStatusView):
    MODEL = infra_sim.SimMachinePoolStatus


class SimMachinePoolView(EnginePoolView):
    """The Sim provider's infra pool: ``infrastructure.cluster.x-k8s.io`` SimMachinePool."""

    MODEL = infra_sim.SimMachinePool
    spec = Nested(SimMachinePoolSpecView)
    status = Nested(SimMachinePoolStatusView)


class SimMachineSpecView(EngineMachineSpecView):
    MODEL = infra_sim.SimMachineSpec


class SimMachineStatusView(EngineMachineStatusView):
    MODEL = infra_sim.SimMachineStatus


class SimMachineView(EngineMachineView):
    """The Sim provider's infra machine (one per instance): SimMachine."""

    MODEL = infra_sim.SimMachine
    spec = Nested(SimMachineSpecView)
    status = Nested(SimMachineStatusView)


# --- AWS (infrastructure.machinepool.cluster.x-k8s.io AWSMachinePool) -------------------------


class AWSInstanceEntry(TypedDict, total=False):
    """One entry of an AWSMachinePool's ``status.instances``, as stored: the JSON of
    ``infra_aws.AWSMachinePoolInstanceStatus``."""

    instanceID: str
    version: str


class AWSMachinePoolStatusView(ConditionsView):
    """An AWSMachinePool's status; its conditions are v1beta1 ones, as CAPA writes them."""

    MODEL = infra_aws.AWSMachinePoolStatus
    ready = Field[bool | None]()
    replicas = Field[int | None]()
    instances = Field[list[AWSInstanceEntry] | None]()
    launch_template_id = Field[str | None]()
    launch_template_version = Field[str | None]()
    asg_name = Field[str | None]()
    asg_status = Field[str | None]()
    infrastructure_machine_kind = Field[str | None]()


class AMIReferenceView(View):
    MODEL = infra_aws.AMIReference
    id = Field[str | None]()


class AWSLaunchTemplateView(View):
    """``spec.awsLaunchTemplate``; volumes, security groups and options stay raw JSON (the
    launch template phase maps them onto EC2 parameters as they are)."""

    MODEL = infra_aws.AWSLaunchTemplate
    name = Field[str | None]()
    iam_instance_profile = Field[str | None]()
    ami = Nested(AMIReferenceView)
    image_lookup_format = Field[str | None]()
    image_lookup_org = Field[str | None]()
    image_lookup_base_os = Field[str | None](key="imageLookupBaseOS")
    instance_type = Field[str | None]()
    root_volume = Field[dict[str, Any] | None]()
    non_root_volumes = Field[list[dict[str, Any]] | None]()
    ssh_key_name = Field[str | None]()
    additional_security_groups = Field[list[dict[str, Any]] | None]()
    spot_market_options = Field[dict[str, Any] | None]()
    instance_metadata_options = Field[dict[str, Any] | None]()


class MixedInstancesPolicyView(View):
    MODEL = infra_aws.MixedInstancesPolicy
    instances_distribution = Field[dict[str, Any] | None]()
    overrides = Field[list[dict[str, Any]] | None]()


class RefreshPreferencesView(View):
    MODEL = infra_aws.RefreshPreferences
    disable = Field[bool | None]()
    strategy = Field[str | None]()
    instance_warmup = Field[int | None]()
    min_healthy_percentage = Field[int | None]()
    max_healthy_percentage = Field[int | None]()


class AWSMachinePoolSpecView(View):
    """An AWSMachinePool's spec. ``min_size`` and ``max_size`` read ``None`` when absent (the
    CRD defaults them to 1 on create; readers apply the same default)."""

    MODEL = infra_aws.AWSMachinePoolSpec
    provider_id = Field[str | None]()
    min_size = Field[int | None]()
    max_size = Field[int | None]()
    availability_zones = Field[list[str] | None]()
    subnets = Field[list[dict[str, Any]] | None]()
    additional_tags = Field[dict[str, str] | None]()
    aws_launch_template = Nested(AWSLaunchTemplateView)
    mixed_instances_policy = Nested(MixedInstancesPolicyView)
    provider_id_list = Field[list[str] | None]()
    default_cool_down = Field[str | None]()
    default_instance_warmup = Field[str | None]()
    refresh_preferences = Nested(RefreshPreferencesView)
    capacity_rebalance = Field[bool | None]()
    suspend_processes = Field[dict[str, Any] | None]()
    lifecycle_hooks = Field[list[dict[str, Any]] | None]()
    warm_pool = Field[dict[str, Any] | None]()
    """As stored, for ``providers.aws.plan.warm_pool_params``."""


class AWSMachinePoolView(ObjectView):
    """An AWSMachinePool."""

    MODEL = infra_aws.AWSMachinePool
    spec = Nested(AWSMachinePoolSpecView)
    status = Nested(AWSMachinePoolStatusView)


class AWSMachineSpecView(View):
    MODEL = infra_aws.AWSMachineSpec
    provider_id = Field[str | None]()
    instance_id = Field[str | None]()
    instance_type = Field[str | None]()
    failure_domain = Field[str | None]()


class AWSMachineStatusView(ConditionsView):
    MODEL = infra_aws.AWSMachineStatus
    ready = Field[bool | None]()
    instance_state = Field[str | None]()


class AWSMachineView(ObjectView):
    """One instance of an AWSMachinePool's group: an AWSMachine."""

    MODEL = infra_aws.AWSMachine
    spec = Nested(AWSMachineSpecView)
    status = Nested(AWSMachineStatusView)


# --- MachineDrainRule (cluster.x-k8s.io) ----------------------------------------------------


class MachineDrainRuleDrainView(View):
    MODEL = drainrule.MachineDrainRuleDrainConfig
    behavior = Field[str]()
    order = Field[int | None]()


class MachineDrainRuleSpecView(View):
    """A rule's spec; its selector entries stay as stored, for ``selector.matches``."""

    MODEL = drainrule.MachineDrainRuleSpec
    drain = Nested(MachineDrainRuleDrainView)
    machines = Field[list[dict[str, Any]] | None]()
    pods = Field[list[dict[str, Any]] | None]()


class MachineDrainRuleView(ObjectView):
    MODEL = drainrule.MachineDrainRule
    spec = Nested(MachineDrainRuleSpecView)


# --- Kubernetes' own kinds, as far as the controllers read them ------------------------------
# No model of ours describes them, so these views name no MODEL: each key is the camel case of
# the field's name (``provider_id`` -> ``providerID``), which tests/unit/test_api_views.py
# holds to the Kubernetes API's spelling. Their metadata is ``ObjectView.metadata``.


class NodeSpecView(View):
    provider_id = Field[str | None]()
    unschedulable = Field[bool | None]()
    taints = Field[list[dict[str, Any]] | None]()


class NodeStatusView(View):
    conditions = Field[list[dict[str, Any]] | None]()
    """A Node's conditions carry heartbeat times besides ours (``Condition``'s) keys."""
    node_info = Nested(NodeInfoView)
    volumes_attached = Field[list[dict[str, Any]] | None]()


class NodeView(ObjectView):
    """A workload cluster's Node (``v1``)."""

    spec = Nested(NodeSpecView)
    status = Nested(NodeStatusView)


class PodSpecView(View):
    volumes = Field[list[dict[str, Any]] | None]()


class PodView(ObjectView):
    """A Pod (``v1``), as a drain reads it."""

    spec = Nested(PodSpecView)


class PersistentVolumeSpecView(View):
    csi = Field[dict[str, Any] | None]()
    claim_ref = Field[dict[str, Any] | None]()


class PersistentVolumeView(ObjectView):
    """A PersistentVolume (``v1``)."""

    spec = Nested(PersistentVolumeSpecView)


class VolumeAttachmentSourceView(View):
    persistent_volume_name = Field[str | None]()


class VolumeAttachmentSpecView(View):
    node_name = Field[str | None]()
    source = Nested(VolumeAttachmentSourceView)


class VolumeAttachmentStatusView(View):
    attached = Field[bool | None]()


class VolumeAttachmentView(ObjectView):
    """A VolumeAttachment (``storage.k8s.io/v1``)."""

    spec = Nested(VolumeAttachmentSpecView)
    status = Nested(VolumeAttachmentStatusView)
