"""The controller runtime every machinepool controller runs on.

Reproduces controller-runtime's semantics in asyncio: a raw-JSON API ``Client``; ``Informer``s
(list + watch with bookmarks, re-list on 410) shared through an ``InformerCache``; a
de-duplicating, rate-limited ``WorkQueue``; ``Controller``s with the Result/error contract;
a ``Manager`` with Lease leader election, probes and Prometheus metrics; an ``EventRecorder``;
structured logging; and a ``ClusterCache`` of workload-cluster clients and informers.

Import public names from here; the modules behind them are private.
"""

from machinepool.runtime.client import (
    CLUSTERS,
    CONFIGMAPS,
    CORE_EVENTS,
    CRDS,
    EVENTS,
    KUBEADM_CONFIGS,
    LEASES,
    MACHINE_POOLS,
    MACHINES,
    MUTATING_WEBHOOKS,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    SECRETS,
    SERVICE_ACCOUNTS,
    VALIDATING_WEBHOOKS,
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
from machinepool.runtime.controller import (
    Controller,
    EnqueueHandler,
    Mapper,
    ReconcileFunc,
    Reconciler,
    Result,
    TerminalError,
    object_key,
    owner_key,
)
from machinepool.runtime.errors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
)
from machinepool.runtime.events import EventRecorder
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
from machinepool.runtime.reader import OwnReader
from machinepool.runtime.sharding import Handover, HashRing, LiveLeases, ShardLabels, labels_of
from machinepool.runtime.workqueue import (
    ExponentialBackoff,
    QueueShutDown,
    RateLimiter,
    WorkQueue,
)

__all__ = [
    "CLUSTERS",
    "CONFIGMAPS",
    "CORE_EVENTS",
    "CRDS",
    "EVENTS",
    "KUBEADM_CONFIGS",
    "LEASES",
    "MACHINES",
    "MACHINE_POOLS",
    "MUTATING_WEBHOOKS",
    "NAMESPACES",
    "NODES",
    "PDBS",
    "PODS",
    "SECRETS",
    "SERVICE_ACCOUNTS",
    "VALIDATING_WEBHOOKS",
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "CacheScope",
    "Client",
    "ClusterCache",
    "ClusterNotConnected",
    "ClusterUnhealthy",
    "Conflict",
    "Controller",
    "EnqueueHandler",
    "EventHandler",
    "EventRecorder",
    "ExponentialBackoff",
    "Forbidden",
    "FuncHandler",
    "Gone",
    "Handover",
    "HashRing",
    "IndexFunc",
    "Informer",
    "InformerCache",
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
    "OwnReader",
    "PatchType",
    "Patcher",
    "QueueShutDown",
    "RateLimiter",
    "ReconcileFunc",
    "Reconciler",
    "Resource",
    "Result",
    "RuntimeMetrics",
    "ServerError",
    "ShardLabels",
    "TerminalError",
    "TooManyRequests",
    "Transform",
    "Unauthorized",
    "WatchEvent",
    "WorkQueue",
    "configure_logging",
    "controller_owner",
    "field_indexer",
    "get_logger",
    "label_indexer",
    "labels_of",
    "merge_patch",
    "object_key",
    "owner_indexer",
    "owner_key",
    "strip_managed_fields",
]
