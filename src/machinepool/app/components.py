"""The components ``machinepool run`` can wire, their options dataclasses, and those as flags.

Each component package defines one frozen options dataclass (``CoreOptions``,
``KubeadmOptions``, ``SimOptions``, ``KubeletOptions``, ``AWSOptions``) and a
``setup(mgr, cluster_cache, options)``. Every field of those dataclasses is a flag of
``machinepool run`` named after it (``kubeadmconfig_concurrency`` -> ``--kubeadmconfig-
concurrency``), documented by the field's docstring: ``FLAGS`` is derived from the
dataclasses, so there is one list. Field names are unique across components, so a flag needs
no component prefix; ``tests/unit/test_app_components.py`` keeps them so.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import textwrap
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from machinepool.bootstrap.kubeadm import KubeadmOptions
from machinepool.bootstrap.kubeadm import setup as kubeadm_setup
from machinepool.controllers import core
from machinepool.providers import aws, sim
from machinepool.runtime import ClusterCache, Manager
from machinepool.simworld import kubelet

__all__ = ["COMPONENTS", "FLAGS", "Component", "Flag", "component_options"]


@dataclass(frozen=True)
class Component:
    """One wireable component: its setup function and the dataclass of its options."""

    setup: Callable[[Manager, ClusterCache, Any], Awaitable[object]]
    options: type[Any]


COMPONENTS: dict[str, Component] = {
    "core": Component(core.setup, core.CoreOptions),
    "bootstrap": Component(kubeadm_setup, KubeadmOptions),
    "sim": Component(sim.setup, sim.SimOptions),
    "kubelet": Component(kubelet.setup, kubelet.KubeletOptions),
    "aws": Component(aws.setup, aws.AWSOptions),
}
"""Component name -> how to wire it, in the order they are wired."""


@dataclass(frozen=True)
class Flag:
    """One field of a component's options dataclass, as a command-line flag."""

    component: str
    field: str
    type: type[Any]
    """``int``, ``float``, ``bool``, ``str`` or ``tuple`` (of str, comma-separated)."""
    default: object
    help: str

    @property
    def name(self) -> str:
        return "--" + self.field.replace("_", "-")

    def convert(self, value: object) -> object:
        """``value`` as the field's type; a tuple field also takes a comma-separated string."""
        if self.type is tuple and isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not isinstance(value, self.type) or (self.type is int and isinstance(value, bool)):
            raise ValueError(f"{self.name}: expected {self.type.__name__}, got {value!r}")
        return value


def _field_docs(cls: type[Any]) -> dict[str, str]:
    """The docstring under each field of ``cls``, as one plain line (no reStructuredText
    literals): what ``--help`` shows for its flag."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, following in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = " ".join(following.value.value.replace("``", "").split())
    return docs


def _flags() -> tuple[Flag, ...]:
    found: list[Flag] = []
    for name, component in COMPONENTS.items():
        hints = typing.get_type_hints(component.options)
        docs = _field_docs(component.options)
        for f in dataclasses.fields(component.options):
            if f.metadata.get("flag") is False:
                continue  # set from elsewhere (a feature gate), not a flag of its own
            kind = typing.get_origin(hints[f.name]) or hints[f.name]
            found.append(Flag(name, f.name, kind, f.default, docs.get(f.name, "")))
    return tuple(found)


FLAGS: tuple[Flag, ...] = _flags()
"""Every component option as a flag, in component then field order."""


def component_options(values: Mapping[str, object]) -> dict[str, Any]:
    """Each component's options dataclass from flag values keyed by field name.

    Fields not in ``values`` keep their defaults. An unknown name is refused, so a misspelt
    option fails loudly instead of being dropped::

        >>> component_options({"token_ttl_secs": 60})
        Traceback (most recent call last):
        ValueError: unknown component option token_ttl_secs (--token-ttl-secs); ...
    """
    by_field = {flag.field: flag for flag in FLAGS}
    unknown = sorted(set(values) - by_field.keys())
    if unknown:
        names = ", ".join(f"{u} (--{u.replace('_', '-')})" for u in unknown)
        raise ValueError(f"unknown component option {names}; known: {', '.join(sorted(by_field))}")
    chosen: dict[str, dict[str, object]] = {name: {} for name in COMPONENTS}
    for key, value in values.items():
        flag = by_field[key]
        chosen[flag.component][key] = flag.convert(value)
    return {name: COMPONENTS[name].options(**kw) for name, kw in chosen.items()}
