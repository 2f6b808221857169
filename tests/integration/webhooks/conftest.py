"""Fixtures for the MachinePool webhooks against the real apiserver.

- ``webhooks``: the webhook server running in-process on a free loopback port, registered
  for admission and CRD conversion, and proven effective before any test runs.
- ``infra_crd``: a tiny infrastructure CRD so refs to it can be converted to v1beta1.
- ``machine_pool(namespace, name, **changes)``: a valid v1beta2 MachinePool body.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from tests.support import builders
from tests.support.conditions import is_true
from tests.support.resources import MACHINE_POOLS, MACHINE_POOLS_V1BETA1
from tests.support.waiting import until_admission_answers

from machinepool.api.features import FeatureGates
from machinepool.runtime import CRDS, ApiError, Client
from machinepool.webhooks import WebhookServer, register, serve, unregister

INFRA_GROUP = "infrastructure.webhooks.test"
INFRA_KIND = "TestMachinePool"
INFRA_VERSION = "v1alpha9"
DENIED = 'admission webhook "validation.machinepool.cluster.x-k8s.io" denied the request: '
DEFAULT_DENIED = 'admission webhook "default.machinepool.cluster.x-k8s.io" denied the request: '


def machine_pool(namespace: str, name: str = "mp", **spec_changes: Any) -> dict[str, Any]:
    """A valid v1beta2 MachinePool of this suite's infrastructure kind, replicas left to
    admission; keyword arguments replace top-level spec fields."""
    return builders.machine_pool(
        namespace,
        name,
        replicas=None,
        cluster="c1",
        bootstrap=f"{name}-bootstrap",
        infrastructure=f"{name}-infra",
        infrastructure_group=INFRA_GROUP,
        infrastructure_kind=INFRA_KIND,
        spec=spec_changes,
    )


def _infra_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"testmachinepools.{INFRA_GROUP}",
            "labels": {"cluster.x-k8s.io/v1beta2": INFRA_VERSION},
        },
        "spec": {
            "group": INFRA_GROUP,
            "names": {"kind": INFRA_KIND, "plural": "testmachinepools"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": INFRA_VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


async def _wait_for_conversion(client: Client) -> None:
    """Dry-run a v1beta1 create until the conversion webhook (not plain pruning) answers."""
    body = machine_pool("default", "conversion-probe")
    body["apiVersion"] = "cluster.x-k8s.io/v1beta1"
    template_spec = body["spec"]["template"]["spec"]
    template_spec["bootstrap"] = {"dataSecretName": "probe"}
    template_spec["infrastructureRef"] = {
        "apiVersion": f"{INFRA_GROUP}/{INFRA_VERSION}",
        "kind": INFRA_KIND,
        "name": "probe",
    }
    body["spec"]["minReadySeconds"] = 7
    for _ in range(300):
        try:
            created = await client.create(MACHINE_POOLS_V1BETA1, body, dry_run=True)
            if created["spec"].get("minReadySeconds") == 7:
                return
        except ApiError:
            pass
        await asyncio.sleep(0.1)
    raise TimeoutError("the MachinePool CRD never started calling the conversion webhook")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def infra_crd(client: Client, crds: list[str]) -> str:
    crd = _infra_crd()
    await client.apply(CRDS, crd, field_manager="machinepool-tests")
    for _ in range(300):
        got = await client.get(CRDS, crd["metadata"]["name"])
        if is_true(got, "Established"):
            return str(crd["metadata"]["name"])
        await asyncio.sleep(0.1)
    raise TimeoutError("test infrastructure CRD never became Established")


@pytest_asyncio.fixture(scope="package", loop_scope="session")
async def webhooks(client: Client, crds: list[str], infra_crd: str) -> AsyncIterator[WebhookServer]:
    """Registered for this package's tests only: left on the session's apiserver, it would
    default and refuse what later tests of other packages create (run in any order)."""
    server = await serve("127.0.0.1", 0, FeatureGates(), client=client)
    try:
        await register(client, server.url, server.ca_bundle)
        probe = machine_pool("default", "admission-probe")
        probe["spec"]["template"]["spec"]["bootstrap"] = {}
        await until_admission_answers(client, MACHINE_POOLS, probe)
        await _wait_for_conversion(client)
        yield server
    finally:
        await unregister(client, conversion=True)
        await server.stop()
