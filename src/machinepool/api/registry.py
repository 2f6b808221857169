"""The registry of kinds this system serves: one entry per CRD, from which CRDs are generated.

A module that defines a new kind (for example an infrastructure ``SimMachinePool``) adds it
with a single ``register_kind(KindInfo(...))`` call; ``crdgen`` then writes its CRD,
``model_for()`` lets generic code (webhooks, the client) find the model for an
apiVersion/kind pair, and ``KindInfo.resource()`` gives the ``Resource`` the client reads and
writes it through, so a plural or a group is written once, here.

``Resource`` lives in this bottom layer, not in the runtime that uses it, so that each module
registering a kind can also export its Resource (``api.kinds.MACHINE_POOLS``,
``api.infra_sim.SIM_MACHINES``); ``machinepool.runtime`` re-exports the class.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel

__all__ = [
    "KindInfo",
    "PrinterColumn",
    "Resource",
    "ScaleSubresource",
    "VersionInfo",
    "kind_for",
    "model_for",
    "register_kind",
    "registered_kinds",
]


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API: enough to build its URLs.

    >>> NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
    >>> NODES.path(name="n1")
    '/api/v1/nodes/n1'
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        return base


@dataclass(frozen=True)
class PrinterColumn:
    """A ``kubectl get`` column (additionalPrinterColumns entry)."""

    name: str
    type: Literal["string", "integer", "number", "boolean", "date"]
    json_path: str
    description: str = ""
    priority: int = 0


@dataclass(frozen=True)
class ScaleSubresource:
    """The ``scale`` subresource: where kubectl scale and the autoscaler read and write replicas."""

    spec_replicas_path: str = ".spec.replicas"
    status_replicas_path: str = ".status.replicas"
    label_selector_path: str | None = None


@dataclass(frozen=True)
class VersionInfo:
    """One served version of a kind and the model that describes it."""

    name: str
    model: type[BaseModel]
    storage: bool = False
    served: bool = True
    deprecated: bool = False
    deprecation_warning: str | None = None
    printer_columns: tuple[PrinterColumn, ...] = ()
    status_subresource: bool = True
    scale: ScaleSubresource | None = None


@dataclass(frozen=True)
class KindInfo:
    """Everything needed to generate a CRD for one kind.

    ``labels`` go on the CRD itself: the provider label for clusterctl and, for bootstrap and
    infrastructure kinds, the ``cluster.x-k8s.io/<contract>`` label that tells core which
    version of the kind speaks the contract.
    """

    group: str
    kind: str
    plural: str
    versions: tuple[VersionInfo, ...]
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    scope: Literal["Namespaced", "Cluster"] = "Namespaced"
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def crd_name(self) -> str:
        """``<plural>.<group>``, the CRD's metadata.name."""
        return f"{self.plural}.{self.group}"

    def resource(self, version: str | None = None) -> Resource:
        """The Resource of this kind served at ``version``, by default its storage version.

        >>> from machinepool.api.kinds import MACHINE_POOL
        >>> MACHINE_POOL.resource("v1beta1").api_version
        'cluster.x-k8s.io/v1beta1'
        """
        if version is None:
            version = next(v.name for v in self.versions if v.storage)
        elif version not in {v.name for v in self.versions}:
            raise LookupError(f"{self.kind} is not served at {version}")
        return Resource(self.group, version, self.plural, self.kind, self.scope == "Namespaced")


_KINDS: dict[tuple[str, str], KindInfo] = {}


def register_kind(info: KindInfo) -> KindInfo:
    """Add a kind; registering the same group/kind again replaces the earlier entry."""
    storage = [v for v in info.versions if v.storage]
    if len(storage) != 1:
        raise ValueError(f"{info.kind}: exactly one storage version required, got {len(storage)}")
    _KINDS[(info.group, info.kind)] = info
    return info


def registered_kinds() -> list[KindInfo]:
    """All registered kinds, sorted by CRD name so generated output is stable."""
    return sorted(_KINDS.values(), key=lambda info: info.crd_name)


def kind_for(group: str, kind: str) -> KindInfo | None:
    """The registered kind for a group and kind, if any."""
    return _KINDS.get((group, kind))


def model_for(api_version: str, kind: str) -> type[BaseModel] | None:
    """The model of ``kind`` at ``api_version`` ("group/version"), if registered."""
    group, _, version = api_version.rpartition("/")
    info = kind_for(group, kind)
    if info is None:
        return None
    return next((v.model for v in info.versions if v.name == version), None)
