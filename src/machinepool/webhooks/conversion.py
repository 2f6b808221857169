"""Lossless MachinePool conversion between v1beta1 (spoke) and v1beta2 (the hub).

The apiserver stores v1beta2 and calls the ``/convert`` endpoint of the webhook server for
every v1beta1 read and write; the server calls ``to_hub`` and ``from_hub`` here. Both are
pure functions over raw JSON dicts.

What moves (v1beta1 -> v1beta2):

- ``spec.minReadySeconds`` -> ``spec.template.spec.minReadySeconds``;
- ``node{Drain,VolumeDetach,Deletion}Timeout`` durations ("1m30s") ->
  ``deletion.node*TimeoutSeconds`` (whole seconds, truncated as upstream does);
- bootstrap ``configRef`` / ``infrastructureRef``: ``corev1.ObjectReference`` ->
  ``{apiGroup, kind, name}`` (the group taken from ``apiVersion``). The way back needs the
  referenced kind's served version, which callers resolve from its CRD's contract label and
  pass in as ``api_versions``;
- status: ``bootstrapReady`` / ``infrastructureReady`` -> ``initialization.*``; old
  conditions, failure fields and counters -> ``deprecated.v1beta1.*``; ``v1beta2.*`` -> top
  level.

Nothing is lost in either direction. When plain conversion cannot reproduce the source
exactly (a ref's version, uid or namespace; "10m" written instead of "10m0s"; empty
containers), the source minus its metadata is kept as JSON in the
``cluster.x-k8s.io/conversion-data`` annotation of the result (upstream keeps the hub there
the same way). On the way back the stored copy is used as is while it still converts to the
object at hand; once the object was edited, only details that still apply (a ref to the same
object, a duration of the same length) are taken from it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from machinepool.api.constants import CLUSTER_GROUP, CONVERSION_DATA_ANNOTATION
from machinepool.api.meta import dig, ensure, format_duration, parse_duration
from machinepool.runtime import copy_obj

__all__ = [
    "HUB_API_VERSION",
    "SPOKE_API_VERSION",
    "ConversionError",
    "from_hub",
    "referenced_group_kinds",
    "to_hub",
]

Obj = dict[str, Any]
APIVersions = Mapping[tuple[str, str], str]

HUB_API_VERSION = f"{CLUSTER_GROUP}/v1beta2"
SPOKE_API_VERSION = f"{CLUSTER_GROUP}/v1beta1"
_REFS = (("infrastructureRef",), ("bootstrap", "configRef"))
_TIMEOUTS = (
    ("nodeDrainTimeout", "nodeDrainTimeoutSeconds"),
    ("nodeVolumeDetachTimeout", "nodeVolumeDetachTimeoutSeconds"),
    ("nodeDeletionTimeout", "nodeDeletionTimeoutSeconds"),
)
_INT32_MAX = 2**31 - 1
_NS_PER_SECOND = 1_000_000_000
# v1beta1 status fields that live under status.deprecated.v1beta1 in the hub.
_DEPRECATED = (
    "conditions",
    "failureReason",
    "failureMessage",
    "readyReplicas",
    "availableReplicas",
    "unavailableReplicas",
)
# hub status fields that live under status.v1beta2 in v1beta1.
_NEW_STATUS = ("conditions", "readyReplicas", "availableReplicas", "upToDateReplicas")
_INITIALIZATION = (
    ("bootstrapReady", "bootstrapDataSecretCreated"),
    ("infrastructureReady", "infrastructureProvisioned"),
)


class ConversionError(ValueError):
    """An object that cannot be converted; the message names the field and the fix."""


# --- public entry points -------------------------------------------------------------------


def to_hub(spoke: Obj) -> Obj:
    """A v1beta1 MachinePool as v1beta2."""
    source, stored = _split_payload(spoke, HUB_API_VERSION)
    versions = _spoke_api_versions(source)
    hub = _plain_to_hub(source)
    if stored is not None:
        candidate = {**stored, "metadata": copy_obj(source.get("metadata", {}))}
        if _converts_back(lambda: _plain_from_hub(candidate, versions), source):
            hub = candidate
    if not _converts_back(lambda: _plain_from_hub(hub, versions), source):
        _store_payload(hub, source)
    return hub


def from_hub(hub: Obj, api_versions: APIVersions | None = None) -> Obj:
    """A v1beta2 MachinePool as v1beta1.

    ``api_versions`` maps ``(apiGroup, kind)`` of the object's refs to the ``apiVersion`` to
    write (see ``referenced_group_kinds``); refs that a stored v1beta1 copy already names need
    no entry. A ref whose version is known nowhere raises ``ConversionError``.
    """
    source, stored = _split_payload(hub, SPOKE_API_VERSION)
    versions: dict[tuple[str, str], str] = {}
    if stored is not None:
        versions.update(_spoke_api_versions(stored))
    versions.update(api_versions or {})
    spoke: Obj | None = None
    if stored is not None:
        candidate = {**stored, "metadata": copy_obj(source.get("metadata", {}))}
        if _converts_back(lambda: _plain_to_hub(candidate), source):
            spoke = candidate
    if spoke is None:
        spoke = _plain_from_hub(source, versions)
        if stored is not None:
            _restore_spoke_details(spoke, stored)
    if not _converts_back(lambda: _plain_to_hub(spoke), source):
        _store_payload(spoke, source)
    return spoke


def referenced_group_kinds(hub: Obj) -> set[tuple[str, str]]:
    """The ``(apiGroup, kind)`` pairs ``from_hub`` needs an apiVersion for."""
    template_spec = _get(hub, "spec", "template", "spec")
    found = set()
    for path in _REFS:
        ref = _get(template_spec, *path)
        if ref:
            found.add((str(ref.get("apiGroup", "")), str(ref.get("kind", ""))))
    return found


# --- the annotation that keeps what the other version cannot hold -------------------------


def _split_payload(obj: Obj, payload_version: str) -> tuple[Obj, Obj | None]:
    """A copy of ``obj`` without our annotation, and the stored object when it is for us."""
    source = copy_obj(obj)
    annotations = _get(source, "metadata", "annotations")
    raw = annotations.get(CONVERSION_DATA_ANNOTATION)
    if not isinstance(raw, str):
        return source, None
    try:
        stored = json.loads(raw)
    except ValueError:
        return source, None
    version = stored.get("apiVersion", HUB_API_VERSION) if isinstance(stored, dict) else None
    if version != payload_version:
        return source, None
    del annotations[CONVERSION_DATA_ANNOTATION]
    if not annotations:
        del source["metadata"]["annotations"]
    return source, stored


def _store_payload(target: Obj, source: Obj) -> None:
    payload = {k: v for k, v in source.items() if k != "metadata"}
    metadata = target.setdefault("metadata", {})
    annotations = metadata.setdefault("annotations", {})
    annotations[CONVERSION_DATA_ANNOTATION] = json.dumps(
        payload, sort_keys=True, separators=(",", ":")
    )


def _converts_back(convert: Callable[[], Obj], expected: Obj) -> bool:
    try:
        return convert() == expected
    except ConversionError:
        return False


# --- field mapping -------------------------------------------------------------------------


def _plain_to_hub(spoke: Obj) -> Obj:
    hub = copy_obj(spoke)
    hub["apiVersion"] = HUB_API_VERSION
    spec = hub.get("spec")
    if isinstance(spec, dict):
        if "minReadySeconds" in spec:
            template_spec = ensure(spec, "template", "spec")
            template_spec["minReadySeconds"] = spec.pop("minReadySeconds")
        template_spec = _get(spec, "template", "spec")
        if template_spec:
            _refs_to_hub(template_spec)
            _timeouts_to_hub(template_spec)
    status = hub.get("status")
    if isinstance(status, dict):
        _status_to_hub(status)
    return hub


def _plain_from_hub(hub: Obj, versions: APIVersions) -> Obj:
    spoke = copy_obj(hub)
    spoke["apiVersion"] = SPOKE_API_VERSION
    namespace = _get(hub, "metadata").get("namespace")
    spec = spoke.get("spec")
    if isinstance(spec, dict):
        template_spec = _get(spec, "template", "spec")
        if template_spec:
            if "minReadySeconds" in template_spec:
                spec["minReadySeconds"] = template_spec.pop("minReadySeconds")
            _refs_from_hub(template_spec, versions, namespace)
            _timeouts_from_hub(template_spec)
    status = spoke.get("status")
    if isinstance(status, dict):
        _status_from_hub(status)
    return spoke


def _refs_to_hub(template_spec: Obj) -> None:
    for *parents, key in _REFS:
        holder = _get(template_spec, *parents)
        ref = holder.get(key)
        if not isinstance(ref, dict):
            continue
        hub_ref = {}
        api_version = ref.get("apiVersion")
        if isinstance(api_version, str) and api_version:
            group, slash, _ = api_version.rpartition("/")
            if slash and not group:
                raise ConversionError(_bad_api_version(key, api_version))
            hub_ref["apiGroup"] = group
        for field in ("kind", "name"):
            if field in ref:
                hub_ref[field] = ref[field]
        holder[key] = hub_ref


def _bad_api_version(key: str, api_version: str) -> str:
    return (
        f"failed to convert object: spec.template.spec.{key}.apiVersion {api_version!r} "
        "is not a valid group/version; write it as <group>/<version>"
    )


def _refs_from_hub(template_spec: Obj, versions: APIVersions, namespace: Any) -> None:
    for *parents, key in _REFS:
        holder = _get(template_spec, *parents)
        ref = holder.get(key)
        if not isinstance(ref, dict):
            continue
        group, kind = str(ref.get("apiGroup", "")), str(ref.get("kind", ""))
        api_version = versions.get((group, kind))
        if api_version is None:
            raise ConversionError(
                f"failed to convert object: cannot tell the API version of {kind}.{group} "
                f"referenced by spec.template.spec.{key}; install its CRD with a "
                "cluster.x-k8s.io/v1beta2 contract label"
            )
        spoke_ref: Obj = {
            "apiVersion": api_version,
            "kind": ref.get("kind"),
            "name": ref.get("name"),
        }
        if namespace:
            spoke_ref["namespace"] = namespace
        holder[key] = {k: v for k, v in spoke_ref.items() if v is not None}


def _timeouts_to_hub(template_spec: Obj) -> None:
    for old, new in _TIMEOUTS:
        if old not in template_spec:
            continue
        raw = template_spec.pop(old)
        if raw is None:
            continue
        try:
            nanos = parse_duration(str(raw))
        except ValueError as err:
            raise ConversionError(
                f"failed to convert object: spec.template.spec.{old}: {err}; "
                'write a Go duration such as "30s" or "5m"'
            ) from err
        seconds = min(int(nanos / _NS_PER_SECOND), _INT32_MAX)
        ensure(template_spec, "deletion")[new] = seconds


def _timeouts_from_hub(template_spec: Obj) -> None:
    deletion = template_spec.get("deletion")
    if not isinstance(deletion, dict):
        return
    for old, new in _TIMEOUTS:
        seconds = deletion.pop(new, None)
        if isinstance(seconds, int):
            template_spec[old] = format_duration(seconds * _NS_PER_SECOND)
    if not deletion:
        del template_spec["deletion"]


def _status_to_hub(status: Obj) -> None:
    deprecated = {k: status.pop(k) for k in _DEPRECATED if k in status}
    new = status.pop("v1beta2", None)
    if isinstance(new, dict):
        status.update(new)
    if deprecated:
        ensure(status, "deprecated", "v1beta1").update(deprecated)
    initialization = {
        new_k: status.pop(old_k) for old_k, new_k in _INITIALIZATION if old_k in status
    }
    if initialization:
        ensure(status, "initialization").update(initialization)


def _status_from_hub(status: Obj) -> None:
    new = {k: status.pop(k) for k in _NEW_STATUS if k in status}
    deprecated = _get(status, "deprecated", "v1beta1")
    for key in _DEPRECATED:
        if key in deprecated:
            status[key] = deprecated.pop(key)
    if isinstance(status.get("deprecated"), dict):
        if isinstance(status["deprecated"].get("v1beta1"), dict) and not deprecated:
            del status["deprecated"]["v1beta1"]
        if not status["deprecated"]:
            del status["deprecated"]
    if new:
        status["v1beta2"] = new
    initialization = status.get("initialization")
    if isinstance(initialization, dict):
        for old_k, new_k in _INITIALIZATION:
            if new_k in initialization:
                status[old_k] = initialization.pop(new_k)
        if not initialization:
            del status["initialization"]


def _restore_spoke_details(spoke: Obj, stored: Obj) -> None:
    """After an edit of the hub: keep v1beta1-only details that still describe the same thing."""
    current = _get(spoke, "spec", "template", "spec")
    before = _get(stored, "spec", "template", "spec")
    for *parents, key in _REFS:
        now, then = _get(current, *parents).get(key), _get(before, *parents).get(key)
        if isinstance(now, dict) and isinstance(then, dict) and _same_target(now, then):
            _get(current, *parents)[key] = then
    for old, _ in _TIMEOUTS:
        now, then = current.get(old), before.get(old)
        if isinstance(now, str) and isinstance(then, str) and _same_length(now, then):
            current[old] = then


def _same_target(a: Obj, b: Obj) -> bool:
    def group(ref: Obj) -> str:
        return str(ref.get("apiVersion", "")).rpartition("/")[0]

    return (group(a), a.get("kind"), a.get("name")) == (group(b), b.get("kind"), b.get("name"))


def _same_length(a: str, b: str) -> bool:
    try:
        return int(parse_duration(a) / _NS_PER_SECOND) == int(parse_duration(b) / _NS_PER_SECOND)
    except ValueError:
        return False


def _spoke_api_versions(spoke: Obj) -> dict[tuple[str, str], str]:
    """``(group, kind) -> apiVersion`` as the v1beta1 object's own refs spell them."""
    template_spec = _get(spoke, "spec", "template", "spec")
    found = {}
    for path in _REFS:
        ref = _get(template_spec, *path)
        api_version = ref.get("apiVersion")
        if isinstance(api_version, str) and "/" in api_version:
            found[(api_version.rpartition("/")[0], str(ref.get("kind", "")))] = api_version
    return found


# --- dict helpers --------------------------------------------------------------------------


def _get(obj: Any, *path: str) -> Obj:
    """The dict at ``path``, or an empty (detached) dict when anything on the way is missing."""
    found = dig(obj, *path)
    return found if isinstance(found, dict) else {}
