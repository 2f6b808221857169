"""The webhook HTTP handlers answer every request, however broken: a review for a review,
a clear 4xx for a body that is not one."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from machinepool.api.features import FeatureGates
from machinepool.webhooks import CONVERT_PATH, MUTATE_PATH, VALIDATE_PATH
from machinepool.webhooks.server import MAX_ADMISSION_BYTES, WebhookServer


async def _post(
    path: str, body: bytes, content_type: str = "application/json", status: int = 200
) -> dict[str, Any]:
    app = WebhookServer(FeatureGates(), None).app()
    async with TestClient(TestServer(app)) as http:
        resp = await http.post(path, data=body, headers={"Content-Type": content_type})
        assert resp.status == status
        return dict(await resp.json())


@pytest.mark.parametrize("path", [MUTATE_PATH, VALIDATE_PATH, CONVERT_PATH])
@pytest.mark.parametrize(
    ("body", "content_type", "status", "names"),
    [
        (b"", "application/json", 400, "not valid JSON"),
        (b"not json", "application/json", 400, "not valid JSON"),
        (b'{"request": {"uid": "u", "oper', "application/json", 400, "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "application/json", 400, "not valid JSON"),
        (b"\xff\xfe{", "application/json", 400, "not valid JSON"),
        (b"[]", "application/json", 400, "'request' object"),
        (b'{"request": 3}', "application/json", 400, "'request' object"),
        (b'{"request": {}}', "text/plain", 415, "Content-Type must be application/json"),
        (b'{"request": {}}', "application/x-www-form-urlencoded", 415, "Content-Type"),
    ],
)
async def test_bodies_that_are_not_reviews_get_a_clear_4xx(
    path: str, body: bytes, content_type: str, status: int, names: str
) -> None:
    answer = await _post(path, body, content_type, status)
    assert answer["kind"] == "Status"
    assert answer["code"] == status
    assert names in answer["message"]


async def test_a_body_over_the_bound_is_refused_unread() -> None:
    big = b'{"request": {"pad": "' + b"x" * (MAX_ADMISSION_BYTES + 1) + b'"}}'
    answer = await _post(VALIDATE_PATH, big, status=413)
    assert str(MAX_ADMISSION_BYTES) in answer["message"]


@pytest.mark.parametrize("path", [MUTATE_PATH, VALIDATE_PATH])
@pytest.mark.parametrize(
    "body",
    [
        b'{"request": {"uid": "u", "operation": "CREATE", "object": "x"}}',
        b'{"request": {"uid": "u", "operation": "UPDATE", "object": [], "oldObject": 7}}',
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
    review = await _post(CONVERT_PATH, b'{"request": {"uid": "c", "objects": 5}}')
    assert review["response"]["result"]["status"] == "Failure"
