"""The public surface of machinepool.runtime is exactly what we mean it to be."""

from __future__ import annotations

import machinepool.runtime as runtime

EXPECTED = {
    # client and resources
    "Client", "Resource", "PatchType", "ObjectList", "WatchEvent", "Obj",
    "CONFIGMAPS", "CORE_EVENTS", "CRDS", "EVENTS", "LEASES", "MUTATING_WEBHOOKS", "NAMESPACES",
    "NODES", "PDBS", "PODS", "SECRETS", "SERVICE_ACCOUNTS", "VALIDATING_WEBHOOKS",
    "PERSISTENT_VOLUMES", "VOLUME_ATTACHMENTS", "wait_established", "copy_obj",
    # contract resolution of referenced kinds
    "ContractResolver", "contract_resource",
    # errors
    "ApiError", "BadRequest", "Unauthorized", "Forbidden", "NamespaceTerminating", "NotFound",
    "Conflict", "AlreadyExists", "Gone", "Invalid", "TooManyRequests", "ServerError",
    "ExpectedError", "is_expected", "describe_error",
    # keys, queue
    "ObjectKey", "WorkQueue", "ExponentialBackoff", "RateLimiter", "QueueShutDown",
    "LOW_PRIORITY", "NORMAL_PRIORITY",
    # informers
    "Informer", "InformerCache", "CacheScope", "EventHandler", "FuncHandler", "IndexFunc",
    "Transform", "OwnReader", "cache_caught_up",
    "strip_managed_fields", "field_indexer", "label_indexer", "owner_indexer",
    "controller_owner",
    # controllers
    "Controller", "Result", "TerminalError", "Reconciler", "ReconcileFunc", "Mapper", "Inputs",
    "EnqueueHandler", "object_key", "owner_key", "metadata_and_spec",
    # the reconcile skeleton
    "Phase", "Outcome", "run_phases", "patch_on_exit", "Steps", "Stop", "Then", "drive",
    "KeyMemory",
    # big objects' progress writes, spaced out
    "ProgressSpacing", "reports_progress",
    # manager
    "Manager", "ManagerState", "ManagerStateError", "LeaderElectionConfig", "LeaderElector",
    "RuntimeMetrics",
    # events, logging, workload clusters
    "EventRecorder", "KVLogger", "Patcher", "merge_patch", "configure_logging", "get_logger",
    "gather_bounded",
    "ClusterCache", "ClusterNotConnected", "ClusterUnhealthy",
    # TLS and secure diagnostics
    "CertReloader", "ServingCert", "self_signed", "pki", "METRICS_READER_ROLE", "SecureServing",
    "TokenAuthorizer",
    # sharding
    "HashRing", "Handover", "LiveLeases", "ShardLabels", "labels_of", "DRAIN_REQUESTED",
    "DRAIN_ACKNOWLEDGED",
}  # fmt: skip


def test_exported_names_are_what_we_mean() -> None:
    assert set(runtime.__all__) == EXPECTED
    assert len(runtime.__all__) == len(EXPECTED), "no duplicates in __all__"


def test_every_exported_name_exists() -> None:
    for name in runtime.__all__:
        assert hasattr(runtime, name), name
