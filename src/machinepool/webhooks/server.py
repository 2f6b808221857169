"""The HTTPS admission and conversion server for MachinePools and MachineHealthChecks.

``serve()`` starts it (the CLI and the test fixture are the callers); the apiserver then
POSTs AdmissionReview v1 to the mutating and validating paths (upstream's paths) and
ConversionReview v1 to ``/convert``. TLS only; the serving certificate follows its files
(``runtime.CertReloader``), so a cert-manager rotation needs no restart.

Every POST passes one gate before any handler sees it (``_read_review``): a body that is not
``application/json`` gets 415, one larger than ``MAX_ADMISSION_BYTES`` (admission) or
``MAX_CONVERSION_BYTES`` (conversion, which carries whole lists) gets 413 (unread when its
Content-Length says so; aiohttp stops reading a chunked body at the larger bound), and one
that is not a JSON review object (malformed, truncated, too deeply nested,
not UTF-8, no ``request``) gets 400; each answer is a ``Status`` naming the problem and the fix.
Behind the gate handlers never raise: any failure, including a bug, becomes a refusal with a
message, so a broken request cannot take the server down and the apiserver always gets an
answer quickly.
"""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
from aiohttp import web

from machinepool.api.features import FeatureGates
from machinepool.runtime import (
    ApiError,
    CertReloader,
    Client,
    contract_resource,
    get_logger,
    self_signed,
)
from machinepool.webhooks import healthcheck
from machinepool.webhooks.conversion import (
    HUB_API_VERSION,
    SPOKE_API_VERSION,
    ConversionError,
    from_hub,
    referenced_group_kinds,
    to_hub,
)
from machinepool.webhooks.machinepool import (
    AdmissionDenied,
    default_machine_pool,
    validate_machine_pool,
    validate_machine_pool_delete,
)

__all__ = [
    "CONVERT_PATH",
    "MHC_MUTATE_PATH",
    "MHC_VALIDATE_PATH",
    "MUTATE_PATH",
    "VALIDATE_PATH",
    "WebhookServer",
    "serve",
]

MUTATE_PATH = "/mutate-cluster-x-k8s-io-v1beta2-machinepool"
VALIDATE_PATH = "/validate-cluster-x-k8s-io-v1beta2-machinepool"
MHC_MUTATE_PATH = "/mutate-cluster-x-k8s-io-v1beta2-machinehealthcheck"
MHC_VALIDATE_PATH = "/validate-cluster-x-k8s-io-v1beta2-machinehealthcheck"
CONVERT_PATH = "/convert"
_API_VERSION_TTL = 30.0
MAX_ADMISSION_BYTES = 7 * 1024 * 1024
"""An AdmissionReview carries at most two objects of at most 1.5 MiB each (etcd's limit);
controller-runtime bounds admission bodies at the same 7 MiB."""
MAX_CONVERSION_BYTES = 64 * 1024 * 1024
"""A ConversionReview carries a whole list (a ``kubectl get mp -A`` in the other version)."""
_log = get_logger("machinepool.webhooks")

Obj = dict[str, Any]


@dataclass
class _Resolver:
    """``(apiGroup, kind) -> apiVersion`` through CRD contract labels, cached briefly."""

    client: Client | None
    cache: dict[tuple[str, str], tuple[float, str]] = field(default_factory=dict)

    async def resolve(self, pairs: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
        found = {}
        for pair in pairs:
            version = await self._one(pair)
            if version is not None:
                found[pair] = version
        return found

    async def _one(self, pair: tuple[str, str]) -> str | None:
        hit = self.cache.get(pair)
        if hit is not None and time.monotonic() - hit[0] < _API_VERSION_TTL:
            return hit[1]
        if self.client is None or not all(pair):
            return None
        try:
            api_version = (await contract_resource(self.client, *pair)).api_version
        except ApiError as err:
            _log.warning("cannot resolve API version", group=pair[0], kind=pair[1], error=str(err))
            return None
        self.cache[pair] = (time.monotonic(), api_version)
        return api_version


ExtraRoute = tuple[str, Callable[[web.Request], Awaitable[web.StreamResponse]]]
"""A provider's admission handler: (URL path, aiohttp handler)."""


class WebhookServer:
    """A running server: ``url`` (https://host:port), ``ca_bundle`` (PEM), ``stop()``."""

    def __init__(
        self,
        gates: FeatureGates,
        client: Client | None,
        extra_routes: Sequence[ExtraRoute] = (),
    ) -> None:
        self.gates = gates
        self._extra_routes = tuple(extra_routes)
        self._resolver = _Resolver(client)
        self._runner: web.AppRunner | None = None
        self.certs: CertReloader | None = None
        """The serving certificate, reloaded when its files change (cert-manager rotation)."""
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.url = ""
        self.ca_bundle = b""

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_CONVERSION_BYTES)
        app.router.add_post(MUTATE_PATH, _guard(self._mutate, _admission_failure))
        app.router.add_post(VALIDATE_PATH, _guard(self._validate, _admission_failure))
        app.router.add_post(CONVERT_PATH, _guard(self._convert, _conversion_failure))
        app.router.add_post(MHC_MUTATE_PATH, _guard(self._mutate_mhc, _admission_failure))
        app.router.add_post(MHC_VALIDATE_PATH, _guard(self._validate_mhc, _admission_failure))
        app.router.add_get("/healthz", _healthz)
        for path, handler in self._extra_routes:
            app.router.add_post(path, _gated(handler))
        return app

    async def start(
        self, host: str, port: int, cert_file: Path | None, key_file: Path | None
    ) -> None:
        if cert_file is None or key_file is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="machinepool-webhook-")
            serving = self_signed(Path(self._tmp.name), (host,))
            cert_file, key_file, self.ca_bundle = (
                serving.cert_file,
                serving.key_file,
                serving.ca_bundle,
            )
        else:
            self.ca_bundle = cert_file.read_bytes()
        self.certs = CertReloader(cert_file, key_file, logger=_log)
        await self.certs.start()
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=self.certs.context)
        await site.start()
        bound = self._runner.addresses[0]
        shown = f"[{bound[0]}]" if ":" in str(bound[0]) else bound[0]
        self.url = f"https://{shown}:{bound[1]}"
        _log.info("webhook server listening", url=self.url, gates=str(self.gates))

    async def stop(self) -> None:
        """Stop listening; idempotent."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.certs is not None:
            await self.certs.stop()
            self.certs = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # -- handlers ---------------------------------------------------------------------

    async def _mutate(self, review: Obj) -> Obj:
        request = review["request"]
        obj = request.get("object")
        if not isinstance(obj, dict):
            return _allowed(request)
        old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
        try:
            defaulted = default_machine_pool(
                obj, old if isinstance(old, dict) else None, dry_run=bool(request.get("dryRun"))
            )
        except AdmissionDenied as denied:
            return _denied(request, denied.status)
        return _patched(request, obj, defaulted)

    async def _validate(self, review: Obj) -> Obj:
        request = review["request"]
        operation = request.get("operation")
        try:
            if operation == "DELETE":
                validate_machine_pool_delete(request.get("oldObject"), self.gates)
            elif operation in ("CREATE", "UPDATE"):
                old = request.get("oldObject") if operation == "UPDATE" else None
                validate_machine_pool(old, request.get("object") or {}, self.gates)
        except AdmissionDenied as denied:
            return _denied(request, denied.status)
        return _allowed(request)

    async def _mutate_mhc(self, review: Obj) -> Obj:
        request = review["request"]
        obj = request.get("object")
        if not isinstance(obj, dict):
            return _allowed(request)
        return _patched(request, obj, healthcheck.default_machine_health_check(obj))

    async def _validate_mhc(self, review: Obj) -> Obj:
        request = review["request"]
        operation = request.get("operation")
        if operation not in ("CREATE", "UPDATE"):
            return _allowed(request)
        old = request.get("oldObject") if operation == "UPDATE" else None
        try:
            healthcheck.validate_machine_health_check(
                old if isinstance(old, dict) else None, request.get("object") or {}
            )
        except AdmissionDenied as denied:
            return _denied(request, denied.status)
        return _allowed(request)

    async def _convert(self, review: Obj) -> Obj:
        request = review["request"]
        desired = request["desiredAPIVersion"]
        objects = request.get("objects") or []
        pairs: set[tuple[str, str]] = set()
        if desired == SPOKE_API_VERSION:
            for obj in objects:
                if obj.get("apiVersion") == HUB_API_VERSION and obj.get("kind") == "MachinePool":
                    pairs |= referenced_group_kinds(obj)
        versions = await self._resolver.resolve(pairs)
        converted = [_convert_one(obj, desired, versions) for obj in objects]
        return _conversion_review(request, {"status": "Success"}, converted)


def _convert_one(obj: Obj, desired: str, versions: dict[tuple[str, str], str]) -> Obj:
    current = obj.get("apiVersion")
    if current == desired:
        return obj
    if obj.get("kind") == "MachineHealthCheck":
        if (current, desired) == (SPOKE_API_VERSION, HUB_API_VERSION):
            return healthcheck.to_hub(obj)
        if (current, desired) == (HUB_API_VERSION, SPOKE_API_VERSION):
            return healthcheck.from_hub(obj)
        raise ConversionError(f"cannot convert MachineHealthCheck from {current!r} to {desired!r}")
    if obj.get("kind") != "MachinePool":
        raise ConversionError(
            f"cannot convert kind {obj.get('kind')!r}: only MachinePool and MachineHealthCheck"
        )
    if (current, desired) == (SPOKE_API_VERSION, HUB_API_VERSION):
        return to_hub(obj)
    if (current, desired) == (HUB_API_VERSION, SPOKE_API_VERSION):
        return from_hub(obj, versions)
    raise ConversionError(f"cannot convert MachinePool from {current!r} to {desired!r}")


# --- review envelopes ----------------------------------------------------------------------


def _patched(request: Obj, obj: Obj, defaulted: Obj) -> Obj:
    """Allowed, with the RFC 6902 patch (the ``jsonpatch`` library's diff) that turns the object
    the apiserver sent into its defaulted form, if they differ."""
    response = _allowed(request)
    patch = jsonpatch.make_patch(obj, defaulted)
    if patch:
        response["response"]["patchType"] = "JSONPatch"
        response["response"]["patch"] = _b64(patch.to_string())
    return response


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _envelope(kind: str, body: Obj) -> Obj:
    api_version = "admission.k8s.io/v1" if kind == "AdmissionReview" else "apiextensions.k8s.io/v1"
    return {"apiVersion": api_version, "kind": kind, "response": body}


def _allowed(request: Obj) -> Obj:
    return _envelope("AdmissionReview", {"uid": request.get("uid", ""), "allowed": True})


def _denied(request: Obj, status: Obj) -> Obj:
    body = {"uid": request.get("uid", ""), "allowed": False, "status": status}
    return _envelope("AdmissionReview", body)


def _conversion_review(request: Obj, result: Obj, objects: list[Obj]) -> Obj:
    body: Obj = {"uid": request.get("uid", ""), "result": result}
    if result.get("status") == "Success":
        body["convertedObjects"] = objects
    return _envelope("ConversionReview", body)


def _admission_failure(review: Any, message: str) -> Obj:
    request = review.get("request") if isinstance(review, dict) else None
    request = request if isinstance(request, dict) else {}
    status = {"status": "Failure", "code": 400, "reason": "BadRequest", "message": message}
    return _denied(request, status)


def _conversion_failure(review: Any, message: str) -> Obj:
    request = review.get("request") if isinstance(review, dict) else None
    request = request if isinstance(request, dict) else {}
    return _conversion_review(request, {"status": "Failure", "message": message}, [])


Handler = Callable[[Obj], Awaitable[Obj]]
RequestHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _guard(
    handler: Handler, failure: Callable[[Any, str], Obj]
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """Wrap a handler so every request gets a JSON answer, whatever goes wrong."""

    async def endpoint(request: web.Request) -> web.Response:
        review = await _read_review(request)
        if isinstance(review, web.Response):
            return review
        try:
            return web.json_response(await handler(review))
        except asyncio.CancelledError:
            raise
        except ConversionError as err:
            return web.json_response(failure(review, str(err)))
        except Exception as err:
            _log.error("webhook request failed", path=request.path, exc_info=err)
            return web.json_response(failure(review, f"{type(err).__name__}: {err}"))

    return endpoint


def _refuse(status: int, reason: str, message: str) -> web.Response:
    """A ``Status`` answer for a request that is not a review we can read."""
    body = {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": status,
        "reason": reason,
        "message": message,
    }
    return web.json_response(body, status=status)


async def _read_review(request: web.Request) -> Obj | web.Response:
    """The request's review, or the 4xx answer saying why the body is not one."""
    kind = "ConversionReview" if request.path == CONVERT_PATH else "AdmissionReview"
    if request.content_type != "application/json":
        return _refuse(
            415,
            "UnsupportedMediaType",
            f"Content-Type must be application/json, not {request.content_type!r}: send a"
            f" {kind} as JSON",
        )
    limit = MAX_CONVERSION_BYTES if kind == "ConversionReview" else MAX_ADMISSION_BYTES
    too_large = _refuse(
        413,
        "RequestEntityTooLarge",
        f"request body is larger than {limit} bytes, the limit for a {kind}",
    )
    if request.content_length is not None and request.content_length > limit:
        return too_large  # refused before reading a byte of it
    try:
        body = await request.read()  # bounded by the app's client_max_size; cached by aiohttp
    except web.HTTPRequestEntityTooLarge:
        return too_large
    except (OSError, ValueError, aiohttp.ClientError) as exc:
        # The client sent less than it announced and went away, or broke the framing.
        return _refuse(400, "BadRequest", f"request body could not be read: {exc}")
    if len(body) > limit:
        return too_large
    try:
        review = json.loads(body)
    except (ValueError, RecursionError) as exc:  # malformed, truncated, not UTF-8, too deep
        return _refuse(400, "BadRequest", f"request body is not valid JSON ({exc}): send a {kind}")
    if not isinstance(review, dict) or not isinstance(review.get("request"), dict):
        return _refuse(
            400, "BadRequest", f"expected a {kind} object with a 'request' object in the body"
        )
    return review


def _gated(handler: RequestHandler) -> RequestHandler:
    """A provider's handler behind the same checks as ours (it reads the cached body)."""

    async def endpoint(request: web.Request) -> web.StreamResponse:
        checked = await _read_review(request)
        if isinstance(checked, web.Response):
            return checked
        return await handler(request)

    return endpoint


async def _healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def serve(
    host: str = "127.0.0.1",
    port: int = 9443,
    gates: FeatureGates | None = None,
    *,
    client: Client | None = None,
    cert_file: Path | None = None,
    key_file: Path | None = None,
    extra_routes: Sequence[ExtraRoute] = (),
) -> WebhookServer:
    """Start the server and return it once it listens (port 0 picks a free port).

    ``client`` lets conversion resolve the served version of referenced kinds; without it
    only refs remembered in the conversion-data annotation can be converted to v1beta1.
    Without ``cert_file``/``key_file`` a self-signed CA and serving cert are generated and
    ``ca_bundle`` holds the CA; with them ``ca_bundle`` is ``cert_file``'s content.
    ``extra_routes`` mounts providers' admission handlers (path, handler) on the same server,
    so one TLS endpoint serves every kind the process owns.
    """
    server = WebhookServer(gates or FeatureGates(), client, extra_routes)
    await server.start(host, port, cert_file, key_file)
    return server
