"""Typed ``bootstrap.cluster.x-k8s.io/v1beta2`` KubeadmConfig (the part that joins workers)
and KubeadmConfigTemplate (a ClusterClass's bootstrap template for pools; upstream's topology
controller makes a KubeadmConfig from its ``spec.template.spec``).

One KubeadmConfig serves a whole MachinePool; the kubeadm bootstrap controller turns it into
a cloud-init (or Ignition) data secret. Fields for ``kubeadm init`` and control plane joins
are not modelled, but survive as extra fields and as free-form schema.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from machinepool.api.meta import (
    FreeForm,
    K8sModel,
    MetaCondition,
    NodeTaint,
    ObjectMeta,
    OpenAPI,
    TemplateMeta,
    V1Beta1Condition,
    list_map,
)

__all__ = [
    "Arg",
    "BootstrapTokenDiscovery",
    "Discovery",
    "File",
    "FileSource",
    "JoinConfiguration",
    "KubeadmConfig",
    "KubeadmConfigInitializationStatus",
    "KubeadmConfigSpec",
    "KubeadmConfigStatus",
    "KubeadmConfigTemplate",
    "KubeadmConfigTemplateResource",
    "KubeadmConfigTemplateSpec",
    "NodeRegistrationOptions",
    "SecretFileSource",
    "Timeouts",
    "User",
]

GROUP_VERSION = "bootstrap.cluster.x-k8s.io/v1beta2"


def _text(max_length: int) -> Any:
    """A bounded non-empty string field constraint."""
    return Field(min_length=1, max_length=max_length)


_Str256 = Annotated[str | None, _text(256)]
_Str512 = Annotated[str | None, _text(512)]
_Seconds = Annotated[int | None, OpenAPI({"format": "int32"}), Field(ge=0)]


class SecretFileSource(K8sModel):
    """A key of a Secret in the config's namespace."""

    name: Annotated[str, _text(253)]
    """Secret name."""
    key: Annotated[str, _text(256)]
    """Key in the Secret's data."""


class FileSource(K8sModel):
    """Where a file's content comes from when not inline."""

    secret: SecretFileSource
    """The Secret holding the content."""


class File(K8sModel):
    """A file written on the machine before kubeadm runs."""

    path: Annotated[str, _text(512)]
    """Absolute path of the file."""
    owner: _Str256 = None
    """Owner, e.g. root:root."""
    permissions: Annotated[str | None, _text(16)] = None
    """Mode, e.g. 0640."""
    encoding: Literal["base64", "gzip", "gzip+base64"] | None = None
    """Encoding of content."""
    append: bool | None = None
    """Append to an existing file instead of replacing it."""
    content: Annotated[str | None, _text(10240)] = None
    """Inline content."""
    content_from: FileSource | None = None
    """Content taken from a Secret."""


class User(K8sModel):
    """A user created on the machine."""

    name: Annotated[str, _text(256)]
    """User name."""
    gecos: _Str256 = None
    """GECOS field."""
    groups: _Str256 = None
    """Additional groups."""
    home_dir: _Str256 = None
    """Home directory."""
    inactive: bool | None = None
    """Create the user inactive."""
    shell: _Str256 = None
    """Login shell."""
    passwd: _Str256 = None
    """Hashed password."""
    passwd_from: FreeForm | None = None
    """Password taken from a Secret."""
    primary_group: _Str256 = None
    """Primary group."""
    lock_password: bool | None = None
    """Disable password login."""
    sudo: _Str256 = None
    """Sudo rule."""
    ssh_authorized_keys: Annotated[
        list[Annotated[str, _text(2048)]] | None,
        OpenAPI({"x-kubernetes-list-type": "atomic"}),
        Field(max_length=100),
    ] = None
    """Authorized SSH public keys."""


class Arg(K8sModel):
    """A command-line flag for a component, without leading dashes."""

    name: Annotated[str, _text(256)]
    """Flag name."""
    value: Annotated[str, Field(min_length=0, max_length=1024)]
    """Flag value."""


class NodeRegistrationOptions(K8sModel):
    """How the joining Node registers itself."""

    name: Annotated[str | None, _text(253)] = None
    """Node name; defaults to the hostname."""
    cri_socket: _Str512 = None
    """Container runtime socket."""
    taints: Annotated[list[NodeTaint] | None, Field(min_length=0, max_length=100)] = None
    """Taints the Node registers with."""
    kubelet_extra_args: Annotated[
        list[Arg] | None,
        list_map("name", "value"),
        Field(min_length=1, max_length=100),
    ] = None
    """Extra kubelet flags as name/value pairs."""
    ignore_preflight_errors: Annotated[
        list[Annotated[str, _text(512)]] | None,
        OpenAPI({"x-kubernetes-list-type": "atomic"}),
        Field(min_length=1, max_length=50),
    ] = None
    """Preflight checks whose errors are ignored."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    """Image pull policy for kubeadm."""
    image_pull_serial: bool | None = None
    """Pull images one at a time."""


class BootstrapTokenDiscovery(K8sModel):
    """Discovery of the cluster through a bootstrap token."""

    token: _Str512 = None
    """Bootstrap token, abcdef.0123456789abcdef."""
    api_server_endpoint: _Str512 = None
    """host:port of the API server."""
    ca_cert_hashes: Annotated[
        list[Annotated[str, _text(512)]] | None,
        OpenAPI({"x-kubernetes-list-type": "atomic"}),
        Field(min_length=1, max_length=100),
    ] = None
    """Pins of the cluster CA public key, sha256:<hex>."""
    unsafe_skip_ca_verification: bool | None = Field(default=None, alias="unsafeSkipCAVerification")
    """Join without pinning the CA."""


class Discovery(K8sModel):
    """How a joining node finds and trusts the cluster."""

    bootstrap_token: BootstrapTokenDiscovery | None = None
    """Token-based discovery."""
    file: FreeForm | None = None
    """Kubeconfig-file discovery."""
    tls_bootstrap_token: _Str512 = None
    """Token for TLS bootstrap; defaults to the discovery token."""


class Timeouts(K8sModel):
    """Time limits of kubeadm steps, in seconds."""

    control_plane_component_health_check_seconds: _Seconds = None
    """Wait for control plane components."""
    kubelet_health_check_seconds: _Seconds = None
    """Wait for the kubelet to be healthy."""
    kubernetes_api_call_seconds: Annotated[
        int | None, OpenAPI({"format": "int32"}), Field(ge=0, alias="kubernetesAPICallSeconds")
    ] = None
    """Limit of one API server request."""
    etcd_api_call_seconds: Annotated[
        int | None, OpenAPI({"format": "int32"}), Field(ge=0, alias="etcdAPICallSeconds")
    ] = None
    """Limit of one etcd request."""
    tls_bootstrap_seconds: _Seconds = None
    """Wait for kubelet TLS bootstrap."""
    discovery_seconds: _Seconds = None
    """Wait for API server identity validation."""


class JoinConfiguration(K8sModel):
    """The ``kubeadm join`` configuration."""

    node_registration: NodeRegistrationOptions | None = None
    """Node registration options."""
    ca_cert_path: _Str512 = None
    """Path of the cluster CA on the node."""
    discovery: Discovery | None = None
    """Cluster discovery."""
    control_plane: FreeForm | None = None
    """Set when joining a control plane node."""
    skip_phases: Annotated[
        list[Annotated[str, _text(256)]] | None,
        OpenAPI({"x-kubernetes-list-type": "atomic"}),
        Field(min_length=1, max_length=50),
    ] = None
    """kubeadm phases to skip."""
    patches: FreeForm | None = None
    """Patches applied to kubeadm-deployed components."""
    timeouts: Timeouts | None = None
    """kubeadm time limits."""


class KubeadmConfigSpec(K8sModel):
    """What the bootstrap data should do on the machine."""

    cluster_configuration: FreeForm | None = None
    """kubeadm init cluster configuration (control planes only)."""
    init_configuration: FreeForm | None = None
    """kubeadm init configuration (control planes only)."""
    join_configuration: JoinConfiguration | None = None
    """kubeadm join configuration."""
    files: Annotated[
        list[File] | None,
        OpenAPI({"x-kubernetes-list-type": "atomic"}),
        Field(min_length=1, max_length=200),
    ] = None
    """Files to write."""
    disk_setup: FreeForm | None = None
    """Partitions and file systems."""
    mounts: Annotated[list[list[str]] | None, Field(min_length=1, max_length=100)] = None
    """Mount points."""
    boot_commands: Annotated[
        list[Annotated[str, _text(10240)]] | None,
        OpenAPI({"x-kubernetes-list-type": "atomic"}),
        Field(min_length=1, max_length=1000),
    ] = None
    """Commands run very early at every boot."""
    pre_kubeadm_commands: Annotated[
        list[Annotated[str, _text(10240)]] | None,
        OpenAPI({"x-kubernetes-list-type": "atomic"}),
        Field(min_length=1, max_length=1000),
    ] = None
    """Commands run before kubeadm."""
    post_kubeadm_commands: Annotated[
        list[Annotated[str, _text(10240)]] | None,
        OpenAPI({"x-kubernetes-list-type": "atomic"}),
        Field(min_length=1, max_length=1000),
    ] = None
    """Commands run after kubeadm."""
    users: Annotated[
        list[User] | None,
        OpenAPI({"x-kubernetes-list-type": "atomic"}),
        Field(min_length=1, max_length=100),
    ] = None
    """Users to create."""
    ntp: FreeForm | None = None
    """NTP settings."""
    format: Literal["cloud-config", "ignition"] | None = None
    """Output format of the bootstrap data; cloud-config when unset."""
    verbosity: Annotated[int | None, OpenAPI({"format": "int32"})] = None
    """kubeadm log verbosity."""
    ignition: FreeForm | None = None
    """Ignition-specific settings."""


class KubeadmConfigInitializationStatus(K8sModel):
    """Contract flag reporting the data secret."""

    data_secret_created: bool | None = None
    """True once the bootstrap data secret exists."""


class KubeadmConfigV1Beta1DeprecatedStatus(K8sModel):
    """v1beta1-era status kept for conversion."""

    conditions: list[V1Beta1Condition] | None = None
    failure_reason: Annotated[str | None, _text(256)] = None
    failure_message: Annotated[str | None, _text(10240)] = None


class KubeadmConfigDeprecatedStatus(K8sModel):
    """Container of deprecated status groups."""

    v1beta1: KubeadmConfigV1Beta1DeprecatedStatus | None = None


class KubeadmConfigStatus(K8sModel):
    """The observed state of a KubeadmConfig."""

    conditions: Annotated[list[MetaCondition] | None, list_map("type"), Field(max_length=32)] = None
    """Ready, DataSecretAvailable, CertificatesAvailable, Paused."""
    initialization: KubeadmConfigInitializationStatus | None = None
    """Contract flags."""
    data_secret_name: Annotated[str | None, _text(253)] = None
    """Name of the bootstrap data secret."""
    ready: bool | None = None
    """v1beta1 contract flag (data secret created), kept for older readers."""
    observed_generation: Annotated[int | None, OpenAPI({"format": "int64"}), Field(ge=1)] = None
    """Generation last reconciled."""
    deprecated: KubeadmConfigDeprecatedStatus | None = None
    """Deprecated status groups."""


class KubeadmConfig(K8sModel):
    """Bootstrap configuration for the machines of a pool (or a single Machine)."""

    api_version: str = GROUP_VERSION
    kind: str = "KubeadmConfig"
    metadata: ObjectMeta | None = None
    spec: KubeadmConfigSpec | None = None
    """Desired bootstrap behaviour."""
    status: KubeadmConfigStatus | None = None
    """Observed state."""


class KubeadmConfigTemplateResource(K8sModel):
    """What every KubeadmConfig made from the template gets."""

    metadata: TemplateMeta | None = None
    """Labels and annotations of the KubeadmConfig."""
    spec: KubeadmConfigSpec | None = None
    """The KubeadmConfig's spec."""


class KubeadmConfigTemplateSpec(K8sModel):
    """The template."""

    template: KubeadmConfigTemplateResource
    """The KubeadmConfig to make."""


class KubeadmConfigTemplate(K8sModel):
    """A KubeadmConfig to be made by Cluster API's topology controller (ClusterClass)."""

    api_version: str = GROUP_VERSION
    kind: str = "KubeadmConfigTemplate"
    metadata: ObjectMeta | None = None
    spec: KubeadmConfigTemplateSpec
