"""Shared building blocks of every typed Kubernetes object in ``machinepool.api``.

The controllers, webhooks and providers exchange raw JSON with the apiserver; these
models give that JSON names and types without losing anything: unknown fields are kept
and written back, and ``to_dict()`` emits only what is set.

Schema markers (``OpenAPI``, ``Int32``, ``Time``...) ride along in ``Annotated`` so that
``machinepool.api.schema`` can turn the same models into CRD schemas.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from machinepool.api.constants import DELETE_FOR_MOVE_ANNOTATION

__all__ = [
    "ConditionStatus",
    "ContractVersionedObjectReference",
    "DNS1123Subdomain",
    "FreeForm",
    "Int32",
    "Int64",
    "IntOrString",
    "K8sModel",
    "ListMeta",
    "ManagedFieldsEntry",
    "MetaCondition",
    "NodeTaint",
    "ObjectMeta",
    "ObjectReference",
    "OpenAPI",
    "OwnerReference",
    "TemplateMeta",
    "Time",
    "V1Beta1Condition",
    "adoption_grace_left",
    "camel",
    "deleted_for_move",
    "dig",
    "ensure",
    "format_duration",
    "format_time",
    "list_map",
    "parse_duration",
    "parse_time",
]


@dataclass(frozen=True, eq=False)  # identity hash: typing hashes Annotated metadata
class OpenAPI:
    """Extra keys merged verbatim into a field's generated OpenAPI schema.

    Used for what pydantic cannot express: ``format``, the ``x-kubernetes-*`` extensions.
    """

    keys: Mapping[str, Any] = field(default_factory=dict)


def list_map(*keys: str) -> OpenAPI:
    """Mark a list ``x-kubernetes-list-type: map`` keyed by ``keys``; apply merges items by key."""
    return OpenAPI({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)})


Int32 = Annotated[int, OpenAPI({"format": "int32"})]
Int64 = Annotated[int, OpenAPI({"format": "int64"})]
Time = Annotated[str, OpenAPI({"format": "date-time"})]
"""An RFC 3339 timestamp kept as the apiserver wrote it, so it round-trips byte for byte."""
FreeForm = Annotated[dict[str, Any], OpenAPI({"x-kubernetes-preserve-unknown-fields": True})]
IntOrString = Annotated[int | str, OpenAPI({"x-kubernetes-int-or-string": True})]

_DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123Subdomain = Annotated[str, Field(min_length=1, max_length=253, pattern=_DNS1123_SUBDOMAIN)]


def dig(obj: Mapping[str, Any] | None, *path: str, default: Any = None) -> Any:
    """``obj[path[0]][path[1]]...`` or ``default`` when any step is missing or not a dict.

    Objects come from users and providers: every read tolerates a wrong shape. The one
    definition for every layer above (controllers, providers, webhooks, the CLI).
    """
    for key in path:
        if not isinstance(obj, dict):
            return default
        obj = obj.get(key)
    return default if obj is None else obj


def ensure(obj: dict[str, Any], *path: str) -> dict[str, Any]:
    """The dict at ``path`` inside ``obj``, created (or replaced if not a dict) on the way."""
    for key in path:
        child = obj.get(key)
        if not isinstance(child, dict):
            child = {}
            obj[key] = child
        obj = child
    return obj


def deleted_for_move(obj: Mapping[str, Any] | None) -> bool:
    """Whether ``clusterctl move`` is deleting ``obj`` because a copy of it now lives in the
    target management cluster: what it stands for (instances, Nodes, data in the workload
    cluster) must then be left alone, and only the object let go."""
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return DELETE_FOR_MOVE_ANNOTATION in annotations


ADOPTION_GRACE_SECONDS = 10.0
"""How long a new referenced object with no owner waits quietly for the MachinePool that will
adopt it (see ``adoption_grace_left``)."""


def adoption_grace_left(obj: Mapping[str, Any], now: datetime | None = None) -> float:
    """Seconds until a new object nothing has adopted yet should say that it waits.

    Users apply a pool's objects together, most often the referenced ones first (a
    KubeadmConfig, an infra pool, then the MachinePool), so a config or infra pool usually
    lives a moment with no owner before its MachinePool adopts it. Upstream's controllers
    write nothing then; ours report why they wait, which helps whoever made one by hand, but
    said at once it costs every new pool one status write per object, soon replaced. Within
    ``ADOPTION_GRACE_SECONDS`` of its creation the object stays quiet; 0 after that, or when
    it carries no creation time.
    """
    created = dig(obj, "metadata", "creationTimestamp")
    if not isinstance(created, str) or not created:
        return 0.0
    try:
        since = parse_time(created)
    except ValueError:
        return 0.0
    age = ((now or datetime.now(UTC)) - since).total_seconds()
    return max(0.0, ADOPTION_GRACE_SECONDS - age)


def parse_time(value: str) -> datetime:
    """Parse a Kubernetes timestamp ("2024-05-01T10:00:00Z") into an aware datetime."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def format_time(value: datetime) -> str:
    """Format a datetime the way the apiserver does: UTC, whole seconds, ``Z`` suffix."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- metav1.Duration: Go's time.ParseDuration and Duration.String ---------------------------

_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_DURATION_PART = re.compile(r"(\d*)(?:\.(\d*))?([^\d.]+)")
_INT64_MAX = 2**63 - 1


def parse_duration(text: str) -> int:
    """``time.ParseDuration``: "1h2m3.5s" -> nanoseconds; ValueError when Go would refuse."""
    original, sign = text, 1
    if text[:1] in ("+", "-"):
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    if text == "0":
        return 0
    if not text:
        raise ValueError(f"time: invalid duration {original!r}")
    total, pos = 0, 0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if match is None or (not match.group(1) and not match.group(2)):
            raise ValueError(f"time: invalid duration {original!r}")
        whole, frac, unit = match.groups()
        if unit not in _UNITS_NS:
            raise ValueError(f"time: unknown unit {unit!r} in duration {original!r}")
        scale = _UNITS_NS[unit]
        value = int(whole or "0") * scale
        if frac:
            value += int(frac) * scale // 10 ** len(frac)
        total += value
        pos = match.end()
    if total > _INT64_MAX + (1 if sign < 0 else 0):
        raise ValueError(f"time: invalid duration {original!r}")
    return sign * total


def format_duration(ns: int) -> str:
    """``time.Duration.String``: 90s -> "1m30s", 0 -> "0s", 1.5s -> "1.5s"."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1_000_000_000:
        for unit, scale in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= scale:
                return sign + _fraction(ns, scale) + unit
    hours, rest = divmod(ns, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = _fraction(rest, 1_000_000_000) + "s"
    if hours or minutes:
        text = f"{minutes}m" + text
    if hours:
        text = f"{hours}h" + text
    return sign + text


def _fraction(value: int, scale: int) -> str:
    whole, frac = divmod(value, scale)
    if not frac:
        return str(whole)
    digits = str(frac).rjust(len(str(scale)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"


_ACRONYMS = frozenset({"id", "uid", "uuid", "api", "ca", "ip", "ips", "url", "tls", "cidr", "dns"})


def camel(name: str) -> str:
    """snake_case to the Kubernetes JSON spelling.

    Digits stay as written (``v1beta1``) and acronyms after the first word are upper-cased
    the way Kubernetes APIs spell them: ``provider_id_list`` -> ``providerIDList``,
    ``unsafe_skip_ca_verification`` -> ``unsafeSkipCAVerification``.
    """
    head, *rest = name.split("_")
    return head + "".join(_word(part) for part in rest)


def _word(part: str) -> str:
    return part.upper() if part in _ACRONYMS else part[:1].upper() + part[1:]


class K8sModel(BaseModel):
    """Base of every API model: camelCase on the wire, unknown fields preserved.

    ``to_dict()`` gives the minimal JSON (unset fields omitted); ``from_dict()`` accepts
    what the apiserver returns, including fields this version of the code does not know.
    """

    model_config = ConfigDict(
        alias_generator=camel,
        populate_by_name=True,
        extra="allow",
        use_attribute_docstrings=True,
        validate_assignment=False,
    )

    def to_dict(self) -> dict[str, Any]:
        """The object as JSON-ready data with camelCase keys and no ``None`` values."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Validate raw apiserver JSON into this model."""
        return cls.model_validate(data)


class OwnerReference(K8sModel):
    """An owner of this object; garbage collection follows these links."""

    api_version: str
    """API version of the owner."""
    kind: str
    """Kind of the owner."""
    name: str
    """Name of the owner."""
    uid: str
    """UID of the owner."""
    controller: bool | None = None
    """True when the owner is the managing controller."""
    block_owner_deletion: bool | None = None
    """When true, foreground deletion of the owner waits for this object."""


class ManagedFieldsEntry(K8sModel):
    """One field manager's record (server-side apply bookkeeping)."""

    manager: str | None = None
    operation: str | None = None
    api_version: str | None = None
    time: Time | None = None
    fields_type: str | None = None
    fields_v1: dict[str, Any] | None = Field(default=None, alias="fieldsV1")
    subresource: str | None = None


class ObjectMeta(K8sModel):
    """The subset of metav1.ObjectMeta the controllers read and write."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None
    managed_fields: list[ManagedFieldsEntry] | None = None


class ListMeta(K8sModel):
    """metav1.ListMeta: where a list (or watch) resumes from."""

    resource_version: str | None = None
    continue_: str | None = Field(default=None, alias="continue")
    remaining_item_count: int | None = None


class TemplateMeta(K8sModel):
    """Labels and annotations copied onto objects created from a template."""

    labels: dict[str, str] | None = None
    """Labels to apply to created objects."""
    annotations: dict[str, str] | None = None
    """Annotations to apply to created objects."""


ConditionStatus = Literal["True", "False", "Unknown"]

_CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class MetaCondition(K8sModel):
    """A metav1.Condition: one observation of an object's state, keyed by type."""

    type: Annotated[str, Field(max_length=316, pattern=_CONDITION_TYPE_PATTERN)]
    """Condition type in CamelCase, e.g. Ready."""
    status: ConditionStatus
    """True, False or Unknown."""
    observed_generation: Annotated[int | None, OpenAPI({"format": "int64"}), Field(ge=0)] = None
    """The generation the condition was computed from."""
    last_transition_time: Time
    """When the status last changed."""
    reason: Annotated[str, Field(min_length=1, max_length=1024, pattern=_CONDITION_REASON_PATTERN)]
    """Programmatic CamelCase identifier of the cause."""
    message: Annotated[str, Field(max_length=32768)]
    """Human-readable detail."""


class V1Beta1Condition(K8sModel):
    """A Cluster API v1beta1 condition, which adds a severity to the status."""

    type: Annotated[str, Field(min_length=1, max_length=256)]
    """Condition type in CamelCase, e.g. Ready."""
    status: Annotated[str, Field(min_length=1)]
    """True, False or Unknown."""
    severity: Annotated[str | None, Field(max_length=32)] = None
    """Error, Warning or Info; only meaningful when status is False."""
    last_transition_time: Time
    """When the status last changed."""
    reason: Annotated[str | None, Field(min_length=1, max_length=256)] = None
    """Programmatic CamelCase identifier of the cause."""
    message: Annotated[str | None, Field(min_length=1, max_length=10240)] = None
    """Human-readable detail."""


class ObjectReference(K8sModel):
    """A corev1.ObjectReference: a full pointer to an object, version included."""

    api_version: str | None = None
    """API version of the referent."""
    kind: str | None = None
    """Kind of the referent."""
    name: str | None = None
    """Name of the referent."""
    namespace: str | None = None
    """Namespace of the referent."""
    uid: str | None = None
    """UID of the referent."""
    resource_version: str | None = None
    """Resource version the reference was made at."""
    field_path: str | None = None
    """A field inside the referent, if any."""


class ContractVersionedObjectReference(K8sModel):
    """A reference whose version comes from the target CRD's contract label, not the ref itself."""

    kind: Annotated[
        str, Field(min_length=1, max_length=63, pattern=r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$")
    ]
    """Kind of the referenced object."""
    name: DNS1123Subdomain
    """Name of the referenced object, in the referrer's namespace."""
    api_group: DNS1123Subdomain
    """API group of the referenced object; its version comes from the CRD's contract label."""


class NodeTaint(K8sModel):
    """A corev1.Taint as written into a Node at registration."""

    key: str
    """Taint key."""
    value: str | None = None
    """Taint value."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    """What happens to pods that do not tolerate the taint."""
    time_added: Time | None = None
    """When a NoExecute taint was added."""
