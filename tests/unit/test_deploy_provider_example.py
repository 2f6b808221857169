"""Keeps docs/provider-guide.md true: its example provider satisfies the pool engine's
protocols and behaves as a Backend must (idempotent create, capacity per failure domain,
delete of a missing instance is fine, pools never see each other's instances)."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import ModuleType

import pytest
from tests.support.scripts import load_script

from machinepool.providers.pool import CapacityError, InstanceSpec, template_hash
from machinepool.providers.pool.provider import PoolProvider

REPO = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    return load_script("docs/examples/inventory_provider.py", "inventory_provider")


ex = _load()


def pool(name: str, namespace: str = "ns", uid: str = "0123456789") -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid}, "spec": {}}


def spec(pool_name: str, instance_id: str, rack: str, index: int = 0) -> InstanceSpec:
    return InstanceSpec(
        pool_id=pool_name,
        instance_id=instance_id,
        index=index,
        failure_domain=rack,
        template_hash=template_hash("v1.34.4"),
        version="v1.34.4",
        bootstrap_data=b"#cloud-config\n",
    )


def test_provider_has_every_member_the_engine_uses() -> None:
    provider = ex.InventoryProvider(ex.Inventory({"r1": ["h1"]}))
    members = [m for m in dir(PoolProvider) if not m.startswith("_")]
    members += list(inspect.get_annotations(PoolProvider))
    for member in members:
        assert hasattr(provider, member), member


async def test_create_is_idempotent_and_fills_racks() -> None:
    inventory = ex.Inventory({"r1": ["h1"], "r2": ["h2", "h3"]})
    backend = await ex.InventoryProvider(inventory).backend(pool("web"))
    first = await backend.create(spec("web", "web-01234-0", "r1"))
    again = await backend.create(spec("web", "web-01234-0", "r1"))
    assert first == again
    assert first.provider_id == "inventory://h1"
    with pytest.raises(CapacityError) as err:
        await backend.create(spec("web", "web-01234-1", "r1", 1))
    assert err.value.failure_domain == "r1"
    await backend.create(spec("web", "web-01234-1", "r2", 1))
    assert [i.index for i in await backend.list("web")] == [0, 1]
    assert backend.failure_domains() == {"r1": 1, "r2": 2}


async def test_pools_with_prefix_names_stay_apart() -> None:
    inventory = ex.Inventory({"r1": ["h1", "h2", "h3"]})
    provider = ex.InventoryProvider(inventory)
    a, a1 = pool("a", uid="aaaaa"), pool("a-1", uid="bbbbb")
    backend = await provider.backend(a)
    await backend.create(spec("a", provider.instance_id(a, 0), "r1"))
    await backend.create(spec("a-1", provider.instance_id(a1, 0), "r1"))
    other_ns = await provider.backend(pool("a", namespace="other"))
    assert [i.id for i in await backend.list("a")] == ["a-aaaaa-0"]
    assert [i.id for i in await backend.list("a-1")] == ["a-1-bbbbb-0"]
    assert await other_ns.list("a") == []


async def test_delete_releases_the_host_and_tolerates_missing_ids() -> None:
    inventory = ex.Inventory({"r1": ["h1"]})
    backend = await ex.InventoryProvider(inventory).backend(pool("web"))
    instance = await backend.create(spec("web", "web-x-0", "r1"))
    await backend.delete(instance.id)
    await backend.delete(instance.id)
    assert inventory.claims == {}
    assert (await backend.create(spec("web", "web-x-1", "r1", 1))).provider_id == "inventory://h1"


def test_template_changes_with_version_and_image_only() -> None:
    provider = ex.InventoryProvider(ex.Inventory({}))
    base = pool("web")
    imaged = {**base, "spec": {"image": "ubuntu-24.04"}}
    assert provider.template(base, "v1.34.4")[0] != provider.template(base, "v1.34.5")[0]
    assert provider.template(base, "v1.34.4")[0] != provider.template(imaged, "v1.34.4")[0]
    assert provider.template(imaged, "v1.34.4")[1] == {"image": "ubuntu-24.04"}
