"""The pool engine is generic over the infra-pool contract: it reads and writes a provider's
kinds only through the engine's views (``api.views.EnginePoolView``, ``EngineMachineView``),
and a provider's kinds meet that contract by subclassing them (docs/architecture.md, "The
pool engine and its providers")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from machinepool.api import views
from machinepool.api.views import EngineMachineView, EnginePoolView, View

ENGINE = Path(views.__file__).resolve().parents[1] / "providers" / "pool"
PROVIDER_KIND_MODULES = ("machinepool.api.infra_sim", "machinepool.api.infra_aws")


def _imports(path: Path) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names]
    return found


def _provider_view(name: str) -> bool:
    """A view of one provider's kinds: a ``View`` of ``api.views`` with a model of its own
    that is not one of Cluster API's core kinds."""
    cls = getattr(views, name, None)
    if not (isinstance(cls, type) and issubclass(cls, View) and "MODEL" in vars(cls)):
        return False
    return cls.MODEL.__module__ in PROVIDER_KIND_MODULES


@pytest.mark.parametrize("path", sorted(ENGINE.glob("*.py")), ids=lambda p: p.name)
def test_the_engine_names_no_providers_kind(path: Path) -> None:
    for module, name in _imports(path):
        assert module not in PROVIDER_KIND_MODULES, f"{path.name} imports {module}"
        assert not module.startswith("machinepool.providers.sim"), f"{path.name}: {module}"
        assert not module.startswith("machinepool.providers.aws"), f"{path.name}: {module}"
        if module == "machinepool.api.views":
            assert not _provider_view(name), (
                f"{path.name} imports {name}: the engine reads a provider's kinds through "
                "EnginePoolView / EngineMachineView only"
            )


def test_the_sim_kinds_meet_the_engine_contract() -> None:
    # The view test (test_api_views) holds each inherited engine field to the Sim models.
    assert issubclass(views.SimMachinePoolView, EnginePoolView)
    assert issubclass(views.SimMachineView, EngineMachineView)
    assert issubclass(views.SimMachinePoolView.spec.view, views.EnginePoolSpecView)
    assert issubclass(views.SimMachinePoolView.status.view, views.EnginePoolStatusView)


def test_a_sim_pool_reads_the_same_through_the_engines_view() -> None:
    obj = {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"providerIDList": ["sim://a"], "sim": {"bootDelaySeconds": 3}},
        "status": {"replicas": 1, "instances": [{"instanceID": "a", "state": "running"}]},
    }
    engine, sim = EnginePoolView(obj), views.SimMachinePoolView(obj)

    assert engine.spec.provider_id_list == sim.spec.provider_id_list == ["sim://a"]
    assert engine.status.instances == sim.status.instances
    engine.status.replicas = 2
    assert sim.status.replicas == 2
    assert sim.spec.sim.boot_delay_seconds == 3
