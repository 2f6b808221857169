"""The fields the Cluster API contract lets the core read from objects it references.

A MachinePool names a bootstrap config and an infrastructure pool of any provider; the core
does not own their kinds, only the contract: which fields they carry, where, and what they
mean (upstream's ``internal/contract`` plays this part for Go). ``InfraMachinePool`` and
``BootstrapConfig`` wrap such an object and give those fields typed names, so controllers say
``pool.provisioned`` instead of spelling two status paths and their fallbacks.

Unlike the views of our own kinds (``machinepool.api.views``), these objects were validated
against someone else's schema, or none: every accessor checks the type it finds and reads a
wrong one as absent, so one provider's odd object cannot fail a reconcile. Nothing here
writes: the provider owns these fields.

Which version of a referenced kind speaks the contract is ``machinepool.runtime.kube.resolver``'s
concern (it needs the apiserver); this module only reads objects already fetched.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from machinepool.api.conditions import Condition, get_condition, v1beta1_ready_of
from machinepool.api.constants import READY_CONDITION, UP_TO_DATE_CONDITION
from machinepool.api.views import Field, Nested, View

__all__ = ["BootstrapConfig", "InfraMachine", "InfraMachinePool", "Referenced"]

_FAILURE_MESSAGE_MAX = 10240
"""The longest v1beta1 ``failureMessage`` upstream's schemas admit."""


def _string(value: object) -> str:
    return value if isinstance(value, str) else ""


def _text(value: object) -> str:
    """A value a message or a copy carries as text; absent or empty reads as ``""``."""
    return str(value) if value else ""


def _conditions(value: object) -> list[Condition]:
    listed = [c for c in value if isinstance(c, dict)] if isinstance(value, list) else []
    return cast(list[Condition], listed)


class _Initialization(View):
    provisioned = Field[object]()
    data_secret_created = Field[object]()


class _V1Beta1(View):
    failure_reason = Field[object]()
    failure_message = Field[object]()


class _Deprecated(View):
    v1beta1 = Nested(_V1Beta1)


class _Status(View):
    conditions = Field[object]()
    ready = Field[object]()
    replicas = Field[object]()
    infrastructure_machine_kind = Field[object]()
    data_secret_name = Field[object]()
    failure_reason = Field[object]()
    failure_message = Field[object]()
    initialization = Nested(_Initialization)
    deprecated = Nested(_Deprecated)


class _Spec(View):
    provider_id_list = Field[object]()
    provider_id = Field[object]()
    failure_domain = Field[object]()


class _Metadata(View):
    name = Field[object]()
    deletion_timestamp = Field[object]()


class _Shape(View):
    """Where the contract puts each field. Typed ``object``: another provider's schema (or
    none) validated them, so each accessor checks the type it finds."""

    api_version = Field[object]()
    kind = Field[object]()
    metadata = Nested(_Metadata)
    spec = Nested(_Spec)
    status = Nested(_Status)


class Referenced:
    """What every referenced object may carry, whatever its role."""

    __slots__ = ("_at", "raw")

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.raw = obj
        """The object as read; the reference's informer owns it, so it is not changed."""
        self._at = _Shape(cast(dict[str, Any], obj))  # read only: nothing here writes

    @property
    def name(self) -> str:
        return _string(self._at.metadata.name)

    @property
    def deleting(self) -> bool:
        return bool(self._at.metadata.deletion_timestamp)

    @property
    def ready_condition(self) -> Condition | None:
        """The v1beta2 ``Ready`` condition in ``status.conditions``; one with a severity is a
        v1beta1 condition in the old place, not this."""
        cond = get_condition(_conditions(self._at.status.conditions), READY_CONDITION)
        return None if cond is None or "severity" in cond else cond

    @property
    def v1beta1_ready_condition(self) -> Condition | None:
        """The v1beta1 ``Ready`` condition, as upstream's mirror reads it: from
        ``status.deprecated.v1beta1.conditions`` when the object has that list, else from
        ``status.conditions`` (a v1beta2 condition there serves, without severity)."""
        return v1beta1_ready_of(self.raw)

    @property
    def failure_reason(self) -> str:
        """A terminal failure (v1beta1 contract ``status.failureReason``, or its v1beta2 home
        ``status.deprecated.v1beta1.failureReason``); empty when there is none."""
        status = self._at.status
        return _text(status.failure_reason) or _text(status.deprecated.v1beta1.failure_reason)

    @property
    def failure_message(self) -> str:
        """The failure's description, from the same places as ``failure_reason``."""
        status = self._at.status
        return _text(status.failure_message) or _text(status.deprecated.v1beta1.failure_message)

    def failure_detected(self) -> str:
        """The v1beta1 ``failureMessage`` a referencing object carries for this object's
        failure, in upstream's words (the object's group, version and kind as its Go type
        prints them, the name quoted), cut to the length upstream's schemas admit."""
        at = self._at
        text = (
            f"Failure detected from referenced resource {_text(at.api_version)},"
            f" Kind={_text(at.kind)} with name {json.dumps(self.name)}: {self.failure_message}"
        )
        return text[:_FAILURE_MESSAGE_MAX]


class InfraMachinePool(Referenced):
    """An infrastructure machine pool (``spec.template.spec.infrastructureRef``)."""

    __slots__ = ()

    @property
    def provisioned(self) -> bool:
        """Ready for the MachinePool: ``status.initialization.provisioned`` (v1beta2 contract)
        or ``status.ready`` (v1beta1); both must be the boolean true."""
        return self._at.status.initialization.provisioned is True or self._at.status.ready is True

    @property
    def provider_id_list(self) -> list[str]:
        """``spec.providerIDList``: the provider IDs of the pool's instances, as listed."""
        ids = self._at.spec.provider_id_list
        return [str(p) for p in ids] if isinstance(ids, list) else []

    @property
    def replicas(self) -> int | None:
        """``status.replicas``: how many instances the provider has; ``None`` if unreported."""
        replicas = self._at.status.replicas
        return replicas if isinstance(replicas, int) else None

    @property
    def infrastructure_machine_kind(self) -> str:
        """``status.infrastructureMachineKind``: set when the provider opts into MachinePool
        Machines (one infra machine, and so one Machine, per instance)."""
        return _text(self._at.status.infrastructure_machine_kind)


class InfraMachine(Referenced):
    """One instance's infrastructure machine, of the kind its pool names in
    ``status.infrastructureMachineKind``; the MachinePool makes a Machine for each."""

    __slots__ = ()

    @property
    def provider_id(self) -> str:
        """``spec.providerID``, equal to its Node's once the instance joined."""
        return _text(self._at.spec.provider_id)

    @property
    def failure_domain(self) -> str:
        """``spec.failureDomain``: where the instance runs."""
        return _text(self._at.spec.failure_domain)

    @property
    def outdated(self) -> bool:
        """Its ``UpToDate`` condition is False: the instance runs an older template of its
        pool (ours, not upstream's contract: a pool that leaves replacing to deleted Machines
        says so, for the core's rollouts; one that says nothing is taken as up to date)."""
        cond = get_condition(_conditions(self._at.status.conditions), UP_TO_DATE_CONDITION)
        return cond is not None and cond.get("status") == "False"


class BootstrapConfig(Referenced):
    """A bootstrap config (``spec.template.spec.bootstrap.configRef``)."""

    __slots__ = ()

    @property
    def data_secret_created(self) -> bool:
        """``status.initialization.dataSecretCreated`` (v1beta2 contract) or ``status.ready``
        (v1beta1): the data Secret exists."""
        status = self._at.status
        return bool(status.initialization.data_secret_created) or status.ready is True

    @property
    def data_secret_name(self) -> str:
        """``status.dataSecretName``: the Secret holding the bootstrap data."""
        return _text(self._at.status.data_secret_name)
