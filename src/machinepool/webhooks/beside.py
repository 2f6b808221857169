"""Run beside upstream Cluster API: take MachinePool admission and conversion over from
upstream's core manager, and hand them back.

Upstream's core provider owns the MachinePool CRD and lists MachinePool entries in its own
webhook configurations. With its MachinePool feature gate off (the only way to stop its
MachinePool controller), those entries refuse every MachinePool write, so beside upstream
somebody must change them. We change as little as we can, and keep what we changed:

- ``take_over`` first checks that upstream's gate is off: while upstream's entries are still in
  place, a server-side dry-run create of a MachinePool goes through them, and upstream accepts
  it only with the gate on (``UpstreamStillReconciles``). Then it copies every MachinePool
  entry of a webhook configuration that is not ours, and the CRD's ``spec.conversion`` with
  its cert-manager CA annotation, into the record ConfigMap ``machinepool-beside-upstream``;
  only then does it register ours and remove those entries. The record is written once: a
  second take-over (a restart, another replica) adds only entries it had not seen.
- ``hand_back`` puts the recorded entries back into the configurations they came from (by
  name, never duplicating one already there), restores the CRD's conversion and annotation
  exactly, deletes our own webhook configurations and then the record.

Called by the core manager started with ``--beside-upstream`` (``machinepool.app``), and by
``machinepool upstream hand-back`` before ours is uninstalled.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from machinepool.api.constants import CLUSTER_GROUP
from machinepool.api.kinds import MACHINE_POOLS
from machinepool.runtime import (
    CONFIGMAPS,
    CRDS,
    MUTATING_WEBHOOKS,
    VALIDATING_WEBHOOKS,
    ApiError,
    Client,
    Conflict,
    NotFound,
    Obj,
    PatchType,
    Resource,
    copy_obj,
    get_logger,
)
from machinepool.webhooks.registration import MACHINE_POOL_CRD

__all__ = [
    "CA_INJECTION_ANNOTATION",
    "RECORD_NAME",
    "Record",
    "UpstreamStillReconciles",
    "hand_back",
    "read_record",
    "take_over",
]

RECORD_NAME = "machinepool-beside-upstream"
CA_INJECTION_ANNOTATION = "cert-manager.io/inject-ca-from"
OURS_PREFIX = "machinepool-"
"""Our webhook configurations are named so (deploy/ and ``register()``); others are foreign."""
_KINDS: dict[str, Resource] = {"mutating": MUTATING_WEBHOOKS, "validating": VALIDATING_WEBHOOKS}
_GATE_OFF_HINT = "feature flag"
"""Upstream's MachinePool webhook, gate off, refuses with "... only if the MachinePool feature
flag is enabled" (core/webhooks/admission/machinepool.go)."""

log = get_logger(__name__)


class UpstreamStillReconciles(RuntimeError):
    """Upstream's core manager has its MachinePool feature gate on: sharing is unsafe."""


@dataclass
class Record:
    """What ``take_over`` changed in upstream's objects, as they were before."""

    entries: dict[str, dict[str, list[Obj]]] = field(default_factory=dict)
    """"mutating" / "validating" -> configuration name -> the MachinePool entries removed,
    each ``{"index": <position it had>, "webhook": <entry>}``."""
    conversion: Obj | None = None
    """The MachinePool CRD's ``spec.conversion`` before ours was set (None: not recorded)."""
    annotation: str | None = None
    """Its ``cert-manager.io/inject-ca-from`` annotation before (None: it had none)."""

    def to_data(self) -> dict[str, str]:
        return {
            "entries": json.dumps(self.entries, sort_keys=True),
            "conversion": json.dumps(
                {"conversion": self.conversion, "annotation": self.annotation}, sort_keys=True
            ),
        }

    @classmethod
    def from_data(cls, data: Mapping[str, str]) -> Record:
        conversion = json.loads(data.get("conversion", "{}"))
        return cls(
            entries=json.loads(data.get("entries", "{}")),
            conversion=conversion.get("conversion"),
            annotation=conversion.get("annotation"),
        )


def _serves_machinepools(entry: Obj) -> bool:
    for rule in entry.get("rules") or []:
        groups, resources = rule.get("apiGroups") or [], rule.get("resources") or []
        if {CLUSTER_GROUP, "*"} & set(groups) and {"machinepools", "*"} & set(resources):
            return True
    return False


async def _foreign_entries(client: Client) -> dict[str, dict[str, list[Obj]]]:
    """Per kind and configuration, the MachinePool entries of configurations not ours, each
    as ``{"index": <its position>, "webhook": <the entry>}`` so a hand-back restores order."""
    found: dict[str, dict[str, list[Obj]]] = {}
    for kind, res in _KINDS.items():
        for config in (await client.list(res)).items:
            name = config["metadata"]["name"]
            entries = [
                {"index": i, "webhook": e}
                for i, e in enumerate(config.get("webhooks") or [])
                if _serves_machinepools(e)
            ]
            if entries and not name.startswith(OURS_PREFIX):
                found.setdefault(kind, {})[name] = entries
    return found


def _probe_pool(namespace: str) -> Obj:
    ref = {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Probe", "name": "probe"}
    template = {
        "spec": {
            "clusterName": "probe",
            "bootstrap": {"dataSecretName": "probe"},
            "infrastructureRef": ref,
        }
    }
    return {
        "apiVersion": f"{CLUSTER_GROUP}/v1beta2",
        "kind": "MachinePool",
        "metadata": {"name": "machinepool-beside-upstream-probe", "namespace": namespace},
        "spec": {"clusterName": "probe", "replicas": 0, "template": template},
    }


GATE_PROBE_ATTEMPTS = 30
GATE_PROBE_INTERVAL = 2.0
"""How long an inconclusive probe is retried: in a cluster, the dry-run also passes through our
own webhooks, whose Service may list this Pod only seconds after it became Ready."""


async def check_upstream_gate(client: Client, namespace: str) -> None:
    """Raise ``UpstreamStillReconciles`` when upstream's webhook accepts a MachinePool.

    Only meaningful while upstream's MachinePool entries are in place (they answer the
    dry-run); nothing is stored. A failure that is not upstream's refusal is retried for
    about a minute, then reported.
    """
    for attempt in range(GATE_PROBE_ATTEMPTS):
        try:
            await client.create(MACHINE_POOLS, _probe_pool(namespace), namespace, dry_run=True)
            break
        except ApiError as err:
            if _GATE_OFF_HINT in str(err):
                return
            if attempt + 1 == GATE_PROBE_ATTEMPTS:
                raise UpstreamStillReconciles(
                    "could not tell whether upstream Cluster API reconciles MachinePools: a "
                    f"dry-run MachinePool create failed with {err}; fix that, then start again"
                ) from err
            log.info("upstream's MachinePool gate not known yet", reason=str(err))
            await asyncio.sleep(GATE_PROBE_INTERVAL)
    raise UpstreamStillReconciles(
        "upstream Cluster API's core manager accepts MachinePools, so its MachinePool feature "
        "gate is on and it would reconcile every MachinePool beside us: start "
        "capi-controller-manager with --feature-gates=MachinePool=false (clusterctl: "
        "EXP_MACHINE_POOL=false for the core provider), then start this manager again"
    )


async def read_record(client: Client, namespace: str) -> Record | None:
    try:
        config_map = await client.get(CONFIGMAPS, RECORD_NAME, namespace)
    except NotFound:
        return None
    return Record.from_data(config_map.get("data") or {})


async def _write_record(client: Client, namespace: str, record: Record, exists: bool) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": RECORD_NAME,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "machinepool"},
        },
        "data": record.to_data(),
    }
    if exists:
        await client.patch(CONFIGMAPS, RECORD_NAME, {"data": body["data"]}, namespace)
    else:
        await client.create(CONFIGMAPS, body, namespace)


def _merge(record: Record, found: dict[str, dict[str, list[Obj]]]) -> bool:
    """Add entries not yet recorded; True when the record changed."""
    changed = False
    for kind, configs in found.items():
        for name, entries in configs.items():
            kept = record.entries.setdefault(kind, {}).setdefault(name, [])
            for entry in entries:
                if all(e["webhook"]["name"] != entry["webhook"]["name"] for e in kept):
                    kept.append(entry)
                    changed = True
    return changed


async def _edit(
    client: Client, res: Resource, name: str, edit: Callable[[Any], Any], key: str | None = None
) -> None:
    """Read-modify-write of one cluster-scoped object, retried on conflict (a CA injector or
    upstream's own install may write it meanwhile). ``edit`` gets the object, or its ``key``
    field, and returns the new value."""
    for _ in range(10):
        try:
            obj = await client.get(res, name)
        except NotFound:
            return
        if key is None:
            obj = edit(obj)
        else:
            obj[key] = edit(list(obj.get(key) or []))
        try:
            await client.replace(res, obj)
            return
        except Conflict:
            continue
    raise RuntimeError(f"{res.kind} {name} kept changing under us; try again")


def _restore_conversion(crd: Obj, record: Record) -> Obj:
    crd["spec"]["conversion"] = record.conversion or {"strategy": "None"}
    annotations = crd["metadata"].get("annotations") or {}
    annotations.pop(CA_INJECTION_ANNOTATION, None)
    if record.annotation is not None:
        annotations[CA_INJECTION_ANNOTATION] = record.annotation
    crd["metadata"]["annotations"] = annotations
    return crd


async def take_over(
    client: Client,
    namespace: str,
    *,
    register: Callable[[], Awaitable[None]],
    conversion: Obj,
    annotation: str | None,
) -> Record:
    """Take MachinePool admission and conversion from upstream's core; see the module doc.

    ``register``: an awaitable factory that puts our own MachinePool webhook configurations in
    place (local runs: ``register()``; in a cluster they come with the manifests, so a no-op).
    ``conversion``/``annotation``: what the MachinePool CRD's ``spec.conversion`` and CA
    injection annotation become.
    """
    found = await _foreign_entries(client)
    if found:
        await check_upstream_gate(client, namespace)
    record = await read_record(client, namespace)
    exists = record is not None
    record = record or Record()
    changed = _merge(record, found)
    crd = await client.get(CRDS, MACHINE_POOL_CRD)
    if not exists:
        record.conversion = crd["spec"].get("conversion")
        record.annotation = (crd["metadata"].get("annotations") or {}).get(CA_INJECTION_ANNOTATION)
    if changed or not exists:
        await _write_record(client, namespace, record, exists)
    await register()
    for kind, configs in found.items():
        for name, entries in configs.items():
            moved = {e["webhook"]["name"] for e in entries}

            def remove(hooks: list[Obj], moved: set[str] = moved) -> list[Obj]:
                return [h for h in hooks if h["name"] not in moved]

            await _edit(client, _KINDS[kind], name, remove, "webhooks")
            log.info(
                "took MachinePool webhooks over",
                configuration=name,
                webhooks=",".join(sorted(moved)),
            )
    await client.patch(
        CRDS,
        MACHINE_POOL_CRD,
        {
            "metadata": {"annotations": {CA_INJECTION_ANNOTATION: annotation}},
            "spec": {"conversion": _replacing(conversion)},
        },
        patch_type=PatchType.MERGE,
    )
    return record


def _replacing(conversion: Obj) -> Obj:
    """``conversion`` as a merge patch that replaces the CRD's webhook target: a client
    config names a URL or a Service, never both, so the one not given is removed (upstream's
    may be either, for example a URL where no Service fronts its webhook server)."""
    patch = copy_obj(conversion)
    client_config = (patch.get("webhook") or {}).get("clientConfig")
    if client_config is not None:
        for key in ("url", "service"):
            client_config.setdefault(key, None)
    return patch


WEBHOOK_SERVICE = "machinepool-webhook-service"
SERVING_CERT = "machinepool-serving-cert"
"""Names of our webhook Service and cert-manager Certificate in deploy/config/core."""


def service_conversion(namespace: str) -> Obj:
    """The ``spec.conversion`` of our in-cluster webhook Service in ``namespace``."""
    service = {"namespace": namespace, "name": WEBHOOK_SERVICE, "path": "/convert", "port": 443}
    return {
        "strategy": "Webhook",
        "webhook": {"clientConfig": {"service": service}, "conversionReviewVersions": ["v1"]},
    }


def local_conversion(url_base: str, ca_bundle_pem: bytes) -> Obj:
    """The ``spec.conversion`` of a local webhook server (URL and CA bundle)."""
    return {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {
                "url": url_base.rstrip("/") + "/convert",
                "caBundle": base64.b64encode(ca_bundle_pem).decode(),
            },
            "conversionReviewVersions": ["v1"],
        },
    }


async def hand_back(client: Client, namespace: str) -> Record | None:
    """Undo ``take_over``: upstream's entries and CRD conversion as recorded; ours deleted.

    Returns the record, or None when there was nothing to hand back.
    """
    record = await read_record(client, namespace)
    if record is None:
        return None
    for kind, configs in record.entries.items():
        for name, entries in configs.items():

            def restore(hooks: list[Obj], entries: list[Obj] = entries) -> list[Obj]:
                present = {h["name"] for h in hooks}
                for entry in sorted(entries, key=lambda e: int(e["index"])):
                    if entry["webhook"]["name"] not in present:
                        hooks.insert(int(entry["index"]), entry["webhook"])
                return hooks

            await _edit(client, _KINDS[kind], name, restore, "webhooks")
    await _edit(client, CRDS, MACHINE_POOL_CRD, lambda crd: _restore_conversion(crd, record))
    for res in _KINDS.values():
        for config in (await client.list(res)).items:
            name = config["metadata"]["name"]
            if name.startswith(OURS_PREFIX) and any(
                _serves_machinepools(e) for e in config.get("webhooks") or []
            ):
                with contextlib.suppress(NotFound):
                    await client.delete(res, name)
    with contextlib.suppress(NotFound):
        await client.delete(CONFIGMAPS, RECORD_NAME, namespace)
    log.info("handed MachinePool webhooks and conversion back to upstream")
    return record
