"""Tell the apiserver about the webhook server: admission configurations and CRD conversion.

``register()`` is called by the CLI after ``serve()`` (and by the test fixture). It
server-side-applies a MutatingWebhookConfiguration and a ValidatingWebhookConfiguration for
MachinePools (failurePolicy Fail, so nothing slips through while the server is down) and
switches the MachinePool CRD's conversion to the ``/convert`` endpoint. ``unregister()``
removes the configurations again.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Mapping
from typing import Any

from machinepool.api.constants import CLUSTER_GROUP
from machinepool.runtime import (
    CRDS,
    MUTATING_WEBHOOKS,
    VALIDATING_WEBHOOKS,
    Client,
    NotFound,
    PatchType,
)
from machinepool.webhooks.server import (
    CONVERT_PATH,
    MHC_MUTATE_PATH,
    MHC_VALIDATE_PATH,
    MUTATE_PATH,
    VALIDATE_PATH,
)

__all__ = [
    "DEFAULTING_WEBHOOK_NAME",
    "FIELD_MANAGER",
    "MACHINE_HEALTH_CHECK_CRD",
    "MACHINE_POOL_CRD",
    "VALIDATING_WEBHOOK_NAME",
    "register",
    "register_validation",
    "unregister",
]

MACHINE_POOL_CRD = f"machinepools.{CLUSTER_GROUP}"
MACHINE_HEALTH_CHECK_CRD = f"machinehealthchecks.{CLUSTER_GROUP}"
DEFAULTING_WEBHOOK_NAME = "default.machinepool.cluster.x-k8s.io"
VALIDATING_WEBHOOK_NAME = "validation.machinepool.cluster.x-k8s.io"
MHC_DEFAULTING_WEBHOOK_NAME = "default.machinehealthcheck.cluster.x-k8s.io"
MHC_VALIDATING_WEBHOOK_NAME = "validation.machinehealthcheck.cluster.x-k8s.io"
FIELD_MANAGER = "machinepool-webhooks"
_DEFAULT_CONFIG_NAME = "machinepool-webhooks"


def _webhook(
    name: str,
    url: str,
    ca_bundle: str,
    operations: list[str],
    object_selector: Mapping[str, str] | None,
    resource: str = "machinepools",
) -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": url, "caBundle": ca_bundle},
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": 10,
        "rules": [
            {
                "apiGroups": [CLUSTER_GROUP],
                "apiVersions": ["v1beta2"],
                "operations": operations,
                "resources": [resource],
                "scope": "Namespaced",
            }
        ],
    }
    if object_selector:
        hook["objectSelector"] = {"matchLabels": dict(object_selector)}
    return hook


async def register(
    client: Client,
    server_url_base: str,
    ca_bundle_pem: bytes,
    *,
    config_name: str = _DEFAULT_CONFIG_NAME,
    object_selector: Mapping[str, str] | None = None,
    conversion: bool = True,
    health_checks: bool = True,
) -> None:
    """Point MachinePool admission (and, with ``conversion``, CRD conversion) at the server.

    With ``health_checks`` MachineHealthCheck admission and conversion go there too (not
    beside upstream Cluster API, whose core serves its own MachineHealthChecks).

    ``config_name`` names both webhook configurations; a second server (another feature-gate
    setting, a test) can register under another name with an ``object_selector`` so it only
    sees the MachinePools labelled for it.
    """
    base = server_url_base.rstrip("/")
    ca = base64.b64encode(ca_bundle_pem).decode()
    mutating: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": config_name},
        "webhooks": [
            _webhook(
                DEFAULTING_WEBHOOK_NAME,
                base + MUTATE_PATH,
                ca,
                ["CREATE", "UPDATE"],
                object_selector,
            )
        ],
    }
    validating: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": config_name},
        "webhooks": [
            _webhook(
                VALIDATING_WEBHOOK_NAME,
                base + VALIDATE_PATH,
                ca,
                ["CREATE", "UPDATE", "DELETE"],
                object_selector,
            )
        ],
    }
    if health_checks:
        mutating["webhooks"].append(
            _webhook(
                MHC_DEFAULTING_WEBHOOK_NAME,
                base + MHC_MUTATE_PATH,
                ca,
                ["CREATE", "UPDATE"],
                object_selector,
                "machinehealthchecks",
            )
        )
        validating["webhooks"].append(
            _webhook(
                MHC_VALIDATING_WEBHOOK_NAME,
                base + MHC_VALIDATE_PATH,
                ca,
                ["CREATE", "UPDATE"],
                object_selector,
                "machinehealthchecks",
            )
        )
    await client.apply(MUTATING_WEBHOOKS, mutating, field_manager=FIELD_MANAGER)
    await client.apply(VALIDATING_WEBHOOKS, validating, field_manager=FIELD_MANAGER)
    if conversion:
        patch = {
            "spec": {
                "conversion": {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {"url": base + CONVERT_PATH, "caBundle": ca},
                        "conversionReviewVersions": ["v1"],
                    },
                }
            }
        }
        await client.patch(CRDS, MACHINE_POOL_CRD, patch, patch_type=PatchType.MERGE)
        if health_checks:
            await client.patch(CRDS, MACHINE_HEALTH_CHECK_CRD, patch, patch_type=PatchType.MERGE)


async def unregister(
    client: Client, *, config_name: str = _DEFAULT_CONFIG_NAME, conversion: bool = False
) -> None:
    """Delete the two configurations; with ``conversion`` also set the CRDs back to None."""
    await client.delete(MUTATING_WEBHOOKS, config_name)
    await client.delete(VALIDATING_WEBHOOKS, config_name)
    if conversion:
        patch = {"spec": {"conversion": {"strategy": "None", "webhook": None}}}
        await client.patch(CRDS, MACHINE_POOL_CRD, patch, patch_type=PatchType.MERGE)
        with contextlib.suppress(NotFound):  # an install without MachineHealthChecks
            await client.patch(CRDS, MACHINE_HEALTH_CHECK_CRD, patch, patch_type=PatchType.MERGE)


async def register_validation(
    client: Client,
    *,
    name: str,
    url: str,
    ca_bundle_pem: bytes,
    api_group: str,
    resource: str,
    operations: tuple[str, ...] = ("CREATE", "UPDATE"),
) -> None:
    """Apply a ValidatingWebhookConfiguration ``name`` for one namespaced resource.

    Used for providers' kinds (for example AWSMachinePool) whose handlers are mounted on the
    same server with ``serve(extra_routes=...)``.
    """
    hook = _webhook(name, url, base64.b64encode(ca_bundle_pem).decode(), list(operations), None)
    hook["rules"] = [
        {
            "apiGroups": [api_group],
            "apiVersions": ["v1beta2"],
            "operations": list(operations),
            "resources": [resource],
            "scope": "Namespaced",
        }
    ]
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [hook],
    }
    await client.apply(VALIDATING_WEBHOOKS, config, field_manager=FIELD_MANAGER)
