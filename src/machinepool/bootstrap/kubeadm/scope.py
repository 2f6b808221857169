"""The per-reconcile state every phase of the KubeadmConfig controller shares.

``controller.py`` builds one ``Scope`` per reconcile and passes it to each phase in turn;
each field's comment names the phase that fills it. Phases mutate ``config`` (finalizers and
status, through its typed view; a private copy) and the controller patches ``config.raw``
once at the end. ``owner`` and ``cluster`` may be views of the informers' shared objects:
read them, never write through them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from machinepool.api import conditions
from machinepool.api.bootstrap_v1beta2 import KubeadmConfig
from machinepool.api.views import (
    ClusterView,
    KubeadmConfigStatusView,
    KubeadmConfigView,
    MachinePoolView,
    MachineView,
)
from machinepool.bootstrap.kubeadm import resources as r
from machinepool.bootstrap.kubeadm.certs import CAInfo
from machinepool.bootstrap.kubeadm.tokens import DEFAULT_TOKEN_TTL_SECONDS, BootstrapToken
from machinepool.runtime import (
    Client,
    ClusterCache,
    EventRecorder,
    Informer,
    KVLogger,
    Obj,
    ObjectKey,
)


@dataclass(frozen=True)
class KubeadmOptions:
    """The bootstrap component's settings; each field is a ``machinepool run`` flag of its name."""

    token_ttl_seconds: int = DEFAULT_TOKEN_TTL_SECONDS
    """Lifetime of each bootstrap token; a pool's token is rotated at half of it."""
    kubeadmconfig_concurrency: int = 10
    """KubeadmConfigs reconciled at once. Each reconcile waits on round trips to both
    apiservers, so this sets how many new pools a second get their bootstrap data
    (upstream's default is 100)."""

    def __post_init__(self) -> None:
        if self.token_ttl_seconds <= 0:
            raise ValueError(f"token_ttl_seconds must be positive, not {self.token_ttl_seconds}")

    @property
    def token_ttl(self) -> timedelta:
        return timedelta(seconds=self.token_ttl_seconds)


@dataclass
class Scope:
    """What one reconcile of one KubeadmConfig knows so far."""

    client: Client
    cluster_cache: ClusterCache
    recorder: EventRecorder
    log: KVLogger
    options: KubeadmOptions
    machine_pools: Informer
    """MachinePools, where the owner phase finds a pool owner."""
    clusters: Informer
    """Clusters, where the cluster phase finds the config's Cluster."""
    config: KubeadmConfigView
    """The KubeadmConfig as read (status and finalizers are edited in place)."""
    model: KubeadmConfig
    """``config`` parsed, for typed access to the spec."""
    owner_kind: str = ""
    """owner phase: "MachinePool", "Machine", or "" for a standalone config."""
    owner: MachinePoolView | MachineView | None = None
    """owner phase: the owning MachinePool (the informer's copy) or Machine, when it exists."""
    cluster_name: str = ""
    """owner phase: from the owner's spec.clusterName, else the cluster-name label."""
    cluster: ClusterView | None = None
    """cluster phase (the informer's copy)."""
    ca: CAInfo | None = None
    """certificates phase: the workload CA (and kubeconfig server)."""
    data_secret: Obj | None = None
    """certificates phase: the existing data Secret, if any."""
    token: BootstrapToken | None = None
    """token phase: the token to render (``None`` when the user supplies discovery)."""
    deleted_at: datetime | None = None
    """For the delete phase: when the config's deletion was seen (or its deletionTimestamp,
    on a config an earlier version's finalizer holds)."""
    halt: bool = False
    """Set by a phase, or a helper of one, that must stop the reconcile (waiting, paused,
    invalid input); the phase then returns a ``runtime.Stop`` (``controller._stops``), so the
    phases after it do not run."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> ObjectKey:
        return ObjectKey.of(self.config.raw)

    @property
    def cluster_key(self) -> ObjectKey:
        return ObjectKey(self.key.namespace, self.cluster_name)

    @property
    def uid(self) -> str:
        return str(self.config.metadata.uid or "")

    @property
    def status(self) -> KubeadmConfigStatusView:
        return self.config.status

    @property
    def pool_owned(self) -> bool:
        return self.owner_kind == "MachinePool"

    def mark(
        self,
        type_: str,
        status: bool | str,
        reason: str,
        message: str = "",
        severity: str = "",
    ) -> None:
        """Set a condition in both the v1beta2 list and the deprecated v1beta1 list."""
        generation = self.config.metadata.generation
        conditions.set_condition(
            self.status.edit_conditions(), type_, status, reason, message, generation
        )
        if status is True:
            reason, message, severity = "", "", ""
        conditions.set_v1beta1_condition(
            self.status.v1beta1.edit_conditions(), type_, status, reason, message, severity
        )

    def wait(self, reason: str, message: str, severity: str = "Info") -> None:
        """DataSecretAvailable=False for something awaited; stop this reconcile."""
        if not self.data_secret_created:
            self.mark(r.DATA_SECRET_AVAILABLE, False, reason, message, severity)
        self.halt = True

    @property
    def user_token(self) -> str:
        """A token the user wrote into the spec (used as is, never managed), or ""."""
        join = self.model.spec.join_configuration if self.model.spec else None
        discovery = join.discovery if join else None
        bootstrap = discovery.bootstrap_token if discovery else None
        return (bootstrap.token if bootstrap else None) or ""

    @property
    def data_secret_created(self) -> bool:
        return bool(self.status.initialization.data_secret_created)
