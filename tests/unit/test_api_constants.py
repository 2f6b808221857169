"""The pool-name label helper and the constants other layers rely on."""

from __future__ import annotations

import pytest

from machinepool.api import constants as c
from machinepool.api.constants import is_valid_label_value, pool_name_label_value

# Upstream's own test vector for util/labels/format.MustFormatValue.
LONG_NAME = "machineSetName" * 12


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("machineSetName", "machineSetName"),
        ("workers", "workers"),
        (LONG_NAME, "hash_FR_ghQ_z"),
    ],
)
def test_pool_name_label_value_matches_upstream(name: str, want: str) -> None:
    assert pool_name_label_value(name) == want


def test_hashed_value_is_itself_a_valid_label_value() -> None:
    value = pool_name_label_value("x" * 64)

    assert value.startswith("hash_")
    assert value.endswith("_z")
    assert is_valid_label_value(value)


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("", True),
        ("a", True),
        ("a.b_c-d", True),
        ("-a", False),
        ("a-", False),
        ("a" * 63, True),
        ("a" * 64, False),
    ],
)
def test_label_value_validity(value: str, valid: bool) -> None:
    assert is_valid_label_value(value) is valid


def test_keys_match_upstream() -> None:
    assert c.MACHINE_POOL_FINALIZER == "machinepool.cluster.x-k8s.io"
    assert c.MACHINE_FINALIZER == "machine.cluster.x-k8s.io"
    assert c.POOL_NAME_LABEL == "cluster.x-k8s.io/pool-name"
    assert c.UNINITIALIZED_TAINT_KEY == "node.cluster.x-k8s.io/uninitialized"
    assert c.AUTOSCALER_MIN_SIZE_ANNOTATION.endswith("node-group-min-size")
    assert c.CONTRACT_LABEL == "cluster.x-k8s.io/v1beta2"
