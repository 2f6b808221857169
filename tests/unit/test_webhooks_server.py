"""The webhook HTTP handlers answer every request, however broken, with a review."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from machinepool.api.features import FeatureGates
from machinepool.webhooks import CONVERT_PATH, MUTATE_PATH, VALIDATE_PATH
from machinepool.webhooks.server import WebhookServer


async def _post(path: str, body: bytes) -> dict[str, Any]:
    app = WebhookServer(FeatureGates(), None).app()
    async with TestClient(TestServer(app)) as http:
        resp = await http.post(path, data=body)
        assert resp.status == 200
        return dict(await resp.json())


@pytest.mark.parametrize("path", [MUTATE_PATH, VALIDATE_PATH])
@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b'{"request": 3}',
        b'{"request": {"uid": "u", "operation": "CREATE", "object": "x"}}',
    ],
)
async def test_admission_never_crashes(path: str, body: bytes) -> None:
    review = await _post(path, body)
    assert review["kind"] == "AdmissionReview"
    response = review["response"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert response["status"]["message"]


async def test_mutate_answers_with_a_json_patch() -> None:
    request = {
        "uid": "u1",
        "operation": "CREATE",
        "object": {"metadata": {"name": "m"}, "spec": {"clusterName": "c", "replicas": 2}},
    }
    review = await _post(MUTATE_PATH, json.dumps({"request": request}).encode())
    response = review["response"]
    assert response["uid"] == "u1"
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    assert {op["path"] for op in ops} == {"/metadata/labels", "/spec/template"}


async def test_convert_failure_is_reported_not_raised() -> None:
    request = {
        "uid": "c1",
        "desiredAPIVersion": "cluster.x-k8s.io/v1beta1",
        "objects": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine"}],
    }
    review = await _post(CONVERT_PATH, json.dumps({"request": request}).encode())
    assert review["kind"] == "ConversionReview"
    assert review["response"]["uid"] == "c1"
    assert review["response"]["result"]["status"] == "Failure"
    assert "only MachinePool" in review["response"]["result"]["message"]


async def test_convert_garbage_is_a_failure_result() -> None:
    review = await _post(CONVERT_PATH, b"{")
    assert review["response"]["result"]["status"] == "Failure"
