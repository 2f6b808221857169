"""The bodies tests build (tests/support/builders) are valid objects of our API as they stand,
and an override changes only what it names."""

from __future__ import annotations

from tests.support.builders import machine_pool, pool_objects

from machinepool.api.registry import model_for


def test_a_pools_objects_validate_against_our_models() -> None:
    for res, body in pool_objects("ns", "workers", replicas=3, failure_domains=["a"]):
        model = model_for(body["apiVersion"], body["kind"])
        assert model is not None, res.kind
        model.model_validate(body)
        assert body["metadata"] == {"name": "workers", "namespace": "ns"}


def test_overrides_change_only_what_they_name() -> None:
    plain = machine_pool("ns", "p")
    unset = machine_pool("ns", "p", replicas=None, version=None, bootstrap="boot")
    assert plain["spec"]["replicas"] == 1
    assert "replicas" not in unset["spec"]
    assert "version" not in unset["spec"]["template"]["spec"]
    assert unset["spec"]["template"]["spec"]["bootstrap"]["configRef"]["name"] == "boot"
    assert (
        unset["spec"]["template"]["spec"]["infrastructureRef"]
        == (plain["spec"]["template"]["spec"]["infrastructureRef"])
    )
