"""The controller runtime every machinepool controller runs on.

Reproduces controller-runtime's semantics in asyncio: a raw-JSON API ``Client``; ``Informer``s
(list + watch with bookmarks, re-list on 410) shared through an ``InformerCache``; a
de-duplicating, rate-limited ``WorkQueue``; ``Controller``s with the Result/error contract;
a ``Manager`` with Lease leader election, probes and Prometheus metrics; an ``EventRecorder``;
structured logging; a ``ClusterCache`` of workload-cluster clients and informers; and the
one shape of a reconcile (``run_phases``, ``patch_on_exit``, ``Outcome.settle``).

Import public names from here; the modules behind them are private.
"""

from machinepool.runtime.client import (
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
)
from machinepool.runtime.clustercache import (
    ClusterCache,
    ClusterNotConnected,
    ClusterUnhealthy,
)
from machinepool.runtime.contract import ContractResolver, contract_resource
from machinepool.runtime.controller import (
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
from machinepool.runtime.diagnostics import METRICS_READER_ROLE, SecureServing, TokenAuthorizer
from machinepool.runtime.errors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    ExpectedError,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
    describe_error,
    is_expected,
)
from machinepool.runtime.events import EventRecorder
from machinepool.runtime.gather import gather_bounded
from machinepool.runtime.informer import (
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
from machinepool.runtime.keys import ObjectKey
from machinepool.runtime.leaderelection import LeaderElectionConfig, LeaderElector
from machinepool.runtime.logging import KVLogger, configure_logging, get_logger
from machinepool.runtime.manager import Manager, ManagerState, ManagerStateError
from machinepool.runtime.metrics import RuntimeMetrics
from machinepool.runtime.patch import Patcher, merge_patch
from machinepool.runtime.phases import Outcome, Phase, patch_on_exit, run_phases
from machinepool.runtime.reader import OwnReader
from machinepool.runtime.sharding import (
    DRAIN_ACKNOWLEDGED,
    DRAIN_REQUESTED,
    Handover,
    HashRing,
    LiveLeases,
    ShardLabels,
    labels_of,
)
from machinepool.runtime.tls import CertReloader, ServingCert, self_signed
from machinepool.runtime.workqueue import (
    ExponentialBackoff,
    QueueShutDown,
    RateLimiter,
    WorkQueue,
)

__all__ = [
    "CONFIGMAPS",
    "CORE_EVENTS",
    "CRDS",
    "DRAIN_ACKNOWLEDGED",
    "DRAIN_REQUESTED",
    "EVENTS",
    "LEASES",
    "METRICS_READER_ROLE",
    "MUTATING_WEBHOOKS",
    "NAMESPACES",
    "NODES",
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
    "LeaderElectionConfig",
    "LeaderElector",
    "LiveLeases",
    "Manager",
    "ManagerState",
    "ManagerStateError",
    "Mapper",
    "NotFound",
    "Obj",
    "ObjectKey",
    "ObjectList",
    "Outcome",
    "OwnReader",
    "PatchType",
    "Patcher",
    "Phase",
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
    "TerminalError",
    "TokenAuthorizer",
    "TooManyRequests",
    "Transform",
    "Unauthorized",
    "WatchEvent",
    "WorkQueue",
    "configure_logging",
    "contract_resource",
    "controller_owner",
    "describe_error",
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
    "run_phases",
    "self_signed",
    "strip_managed_fields",
]
