"""How an API server's error status becomes one of our errors."""

from __future__ import annotations

from machinepool.runtime.kube.errors import (
    AlreadyExists,
    Conflict,
    Forbidden,
    NamespaceTerminating,
    NotFound,
    ServerError,
    error_for,
    only_namespace_terminating,
)

TERMINATING = {
    "kind": "Status",
    "status": "Failure",
    "reason": "Forbidden",
    "code": 403,
    "message": 'secrets "s" is forbidden: unable to create new content in namespace ns '
    "because it is being terminated",
    "details": {
        "name": "s",
        "kind": "secrets",
        "causes": [
            {
                "reason": "NamespaceTerminating",
                "message": "namespace ns is being terminated",
                "field": "metadata.namespace",
            }
        ],
    },
}


def test_a_create_in_a_terminating_namespace_is_told_apart_from_rbac() -> None:
    terminating = error_for(403, TERMINATING)
    assert isinstance(terminating, NamespaceTerminating)
    assert terminating.reason == "NamespaceTerminating"
    rbac = error_for(403, {"reason": "Forbidden", "message": 'User "x" cannot create'})
    assert type(rbac) is Forbidden


def test_statuses_map_to_their_errors() -> None:
    assert type(error_for(404, {"reason": "NotFound"})) is NotFound
    assert type(error_for(409, {"reason": "AlreadyExists"})) is AlreadyExists
    assert type(error_for(409, {"reason": "Conflict"})) is Conflict
    assert type(error_for(503, None, "down")) is ServerError


def test_only_namespace_terminating_needs_every_leaf() -> None:
    terminating = error_for(403, TERMINATING)
    assert only_namespace_terminating(terminating)
    assert only_namespace_terminating(ExceptionGroup("pool", [terminating, terminating]))
    assert not only_namespace_terminating(ExceptionGroup("pool", [terminating, KeyError("x")]))
    assert not only_namespace_terminating(error_for(403, {"reason": "Forbidden"}))
