"""The controller runtime every machinepool controller runs on.

Reproduces controller-runtime's semantics in asyncio: a raw-JSON API ``Client``; ``Informer``s
(list + watch with bookmarks, re-list on 410) shared through an ``InformerCache``; a
de-duplicating, rate-limited priority ``WorkQueue``; ``Controller``s with the Result/error contract;
a ``Manager`` with Lease leader election, probes and Prometheus metrics; an ``EventRecorder``;
structured logging; a ``ClusterCache`` of workload-cluster clients and informers; and the
one shape of a reconcile (``drive`` over ``Steps``, ``run_phases``, ``Outcome.settle``).

Four rooms, each importing only the ones below it (an import-linter contract holds it):
``services`` (manager, leader election, diagnostics, PKI and TLS); ``reconcile`` (controller,
work queue, the reconcile driver, pacing, and sharding: which keys a replica owns); ``kube``
(client, informers, caches, patches, events); ``telemetry`` (logging, metrics).

Import public names from here; the modules behind them are private.
"""

from machinepool.runtime.kube.client import (
    CONFIGMAPS,
    CORE_EVENTS,
    CRDS,
    EVENTS,
    LEASES,
    MUTATING_WEBHOOKS,
    NAMESPACES,
    NODES,
    PDBS,
    PERSISTENT_VOLUMES,
    PODS,
    SECRETS,
    SERVICE_ACCOUNTS,
    VALIDATING_WEBHOOKS,
    VOLUME_ATTACHMENTS,
    Client,
    Obj,
    ObjectList,
    PatchType,
    Resource,
    WatchEvent,
    copy_obj,
    wait_established,
)
from machinepool.runtime.kube.clustercache import (
    ClusterCache,
    ClusterNotConnected,
    ClusterUnhealthy,
)
from machinepool.runtime.kube.errors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    ExpectedError,
    Forbidden,
    Gone,
    Invalid,
    NamespaceTerminating,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
    describe_error,
    is_expected,
)
from machinepool.runtime.kube.events import EventRecorder
from machinepool.runtime.kube.informer import (
    CacheScope,
    EventHandler,
    FuncHandler,
    IndexFunc,
    Informer,
    InformerCache,
    Transform,
    controller_owner,
    field_indexer,
    label_indexer,
    owner_indexer,
    strip_managed_fields,
)
from machinepool.runtime.kube.keys import ObjectKey
from machinepool.runtime.kube.patch import Patcher, merge_patch
from machinepool.runtime.kube.reader import OwnReader, cache_caught_up
from machinepool.runtime.kube.resolver import ContractResolver, contract_resource
from machinepool.runtime.reconcile.controller import (
    Controller,
    EnqueueHandler,
    Inputs,
    Mapper,
    ReconcileFunc,
    Reconciler,
    Result,
    TerminalError,
    metadata_and_spec,
    object_key,
    owner_key,
)
from machinepool.runtime.reconcile.gather import gather_bounded
from machinepool.runtime.reconcile.phases import (
    KeyMemory,
    Outcome,
    Phase,
    Steps,
    Stop,
    Then,
    drive,
    patch_on_exit,
    run_phases,
)
from machinepool.runtime.reconcile.sharding import (
    DRAIN_ACKNOWLEDGED,
    DRAIN_REQUESTED,
    Handover,
    HashRing,
    LiveLeases,
    ShardLabels,
    labels_of,
)
from machinepool.runtime.reconcile.spacing import ProgressSpacing, reports_progress
from machinepool.runtime.reconcile.workqueue import (
    LOW_PRIORITY,
    NORMAL_PRIORITY,
    ExponentialBackoff,
    QueueShutDown,
    RateLimiter,
    WorkQueue,
)
from machinepool.runtime.services import pki
from machinepool.runtime.services.diagnostics import (
    METRICS_READER_ROLE,
    SecureServing,
    TokenAuthorizer,
)
from machinepool.runtime.services.leaderelection import LeaderElectionConfig, LeaderElector
from machinepool.runtime.services.manager import Manager, ManagerState, ManagerStateError
from machinepool.runtime.services.tls import CertReloader, ServingCert, self_signed
from machinepool.runtime.telemetry.logging import KVLogger, configure_logging, get_logger
from machinepool.runtime.telemetry.metrics import RuntimeMetrics

__all__ = [
    "CONFIGMAPS",
    "CORE_EVENTS",
    "CRDS",
    "DRAIN_ACKNOWLEDGED",
    "DRAIN_REQUESTED",
    "EVENTS",
    "LEASES",
    "LOW_PRIORITY",
    "METRICS_READER_ROLE",
    "MUTATING_WEBHOOKS",
    "NAMESPACES",
    "NODES",
    "NORMAL_PRIORITY",
    "PDBS",
    "PERSISTENT_VOLUMES",
    "PODS",
    "SECRETS",
    "SERVICE_ACCOUNTS",
    "VALIDATING_WEBHOOKS",
    "VOLUME_ATTACHMENTS",
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "CacheScope",
    "CertReloader",
    "Client",
    "ClusterCache",
    "ClusterNotConnected",
    "ClusterUnhealthy",
    "Conflict",
    "ContractResolver",
    "Controller",
    "EnqueueHandler",
    "EventHandler",
    "EventRecorder",
    "ExpectedError",
    "ExponentialBackoff",
    "Forbidden",
    "FuncHandler",
    "Gone",
    "Handover",
    "HashRing",
    "IndexFunc",
    "Informer",
    "InformerCache",
    "Inputs",
    "Invalid",
    "KVLogger",
    "KeyMemory",
    "LeaderElectionConfig",
    "LeaderElector",
    "LiveLeases",
    "Manager",
    "ManagerState",
    "ManagerStateError",
    "Mapper",
    "NamespaceTerminating",
    "NotFound",
    "Obj",
    "ObjectKey",
    "ObjectList",
    "Outcome",
    "OwnReader",
    "PatchType",
    "Patcher",
    "Phase",
    "ProgressSpacing",
    "QueueShutDown",
    "RateLimiter",
    "ReconcileFunc",
    "Reconciler",
    "Resource",
    "Result",
    "RuntimeMetrics",
    "SecureServing",
    "ServerError",
    "ServingCert",
    "ShardLabels",
    "Steps",
    "Stop",
    "TerminalError",
    "Then",
    "TokenAuthorizer",
    "TooManyRequests",
    "Transform",
    "Unauthorized",
    "WatchEvent",
    "WorkQueue",
    "cache_caught_up",
    "configure_logging",
    "contract_resource",
    "controller_owner",
    "copy_obj",
    "describe_error",
    "drive",
    "field_indexer",
    "gather_bounded",
    "get_logger",
    "is_expected",
    "label_indexer",
    "labels_of",
    "merge_patch",
    "metadata_and_spec",
    "object_key",
    "owner_indexer",
    "owner_key",
    "patch_on_exit",
    "pki",
    "reports_progress",
    "run_phases",
    "self_signed",
    "strip_managed_fields",
    "wait_established",
]
