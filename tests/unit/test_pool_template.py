"""The template hash changes for version, image and shape, and for nothing else."""

from __future__ import annotations

from machinepool.providers.pool import template_hash


def test_hash_is_stable_and_order_independent() -> None:
    a = template_hash("v1.31.0", "img", {"instanceType": "m", "arch": "amd64"})
    b = template_hash("v1.31.0", "img", {"arch": "amd64", "instanceType": "m"})
    assert a == b
    assert len(a) == 16


def test_version_image_and_shape_each_change_the_hash() -> None:
    base = template_hash("v1.31.0", "img", {"instanceType": "m"})
    assert template_hash("v1.32.0", "img", {"instanceType": "m"}) != base
    assert template_hash("v1.31.0", "img2", {"instanceType": "m"}) != base
    assert template_hash("v1.31.0", "img", {"instanceType": "l"}) != base


def test_bootstrap_data_is_not_an_input() -> None:
    # A token rotation rewrites only the bootstrap data; nothing in the hash can see it.
    assert template_hash.__code__.co_varnames[: template_hash.__code__.co_argcount] == (
        "version",
        "image",
        "shape",
    )
