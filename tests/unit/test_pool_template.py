"""The template hash changes for version, image and shape.

That a new bootstrap token outdates no instance is behaviour of the whole pool, tested end to
end in tests/e2e/test_sim_pool.py (``test_a_new_bootstrap_token_...``).
"""

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
