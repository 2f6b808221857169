"""Which 429 answers the client waits out (as client-go does) and which reach the caller."""

from __future__ import annotations

import pytest

from machinepool.runtime.kube.client import _retryable_429


@pytest.mark.parametrize(
    ("method", "path", "retry_after", "retried"),
    [
        ("GET", "/api/v1/namespaces/a/secrets/s", None, True),
        ("GET", "/api/v1/namespaces/a/secrets/s", "1", True),
        ("PATCH", "/apis/cluster.x-k8s.io/v1beta2/namespaces/a/machinepools/p", "1", True),
        ("POST", "/api/v1/namespaces/a/secrets", "1", True),
        ("PATCH", "/apis/cluster.x-k8s.io/v1beta2/namespaces/a/machinepools/p", None, False),
        # A PodDisruptionBudget's refusal carries Retry-After too: the drain must see it.
        ("POST", "/api/v1/namespaces/a/pods/web-0/eviction", "10", False),
    ],
)
def test_a_429_is_waited_out_unless_it_is_an_answer(
    method: str, path: str, retry_after: str | None, retried: bool
) -> None:
    assert _retryable_429(method, path, retry_after) is retried
