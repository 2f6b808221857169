"""Who may read ``/metrics``: Kubernetes authentication and authorization, as upstream's
managers do by default (controller-runtime's ``WithAuthenticationAndAuthorization`` filter).

The manager's diagnostics listener serves HTTPS and, before answering ``/metrics``, asks the
API server two questions with the manager's own credentials:

1. TokenReview (``authentication.k8s.io/v1``): who is the bearer token in the request?
   No token, or a token the API server does not accept: 401.
2. SubjectAccessReview (``authorization.k8s.io/v1``): may that user ``get`` the non-resource
   URL ``/metrics``? No: 403. The shipped ClusterRole ``machinepool-metrics-reader`` grants it;
   bind it to Prometheus's ServiceAccount.

Answers are cached for ``ttl`` seconds per (token digest, path, verb), so a scrape every 15 s
costs two API calls a minute at most; the token itself is never stored or logged. When the API
server cannot be asked, the request gets 503 and nothing is cached. The probes (``/healthz``,
``/readyz``) are not behind this check: the kubelet probes without credentials.

The manager's ServiceAccount needs ``create`` on ``tokenreviews`` and
``subjectaccessreviews`` (upstream's ``metrics-auth-role``).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from machinepool.runtime.kube.client import Client, Resource
from machinepool.runtime.kube.errors import describe_error, is_expected
from machinepool.runtime.telemetry.logging import KVLogger, get_logger

TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False)
SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False
)
METRICS_READER_ROLE = "machinepool-metrics-reader"
"""The ClusterRole in deploy/ that grants ``get`` on ``/metrics``."""


@dataclass(frozen=True)
class SecureServing:
    """How the diagnostics listener serves securely.

    ``cert_dir``: a folder holding ``tls.crt`` and ``tls.key`` (reloaded when they change);
    ``None`` [default]: a self-signed certificate made at start (Prometheus then scrapes with
    ``insecure_skip_verify``, as for upstream's managers). ``ttl`` [60 s]: how long an
    authentication and authorization answer is reused. ``protected``: the paths that need
    a token [``/metrics``].
    """

    cert_dir: Path | None = None
    ttl: float = 60.0
    protected: frozenset[str] = frozenset({"/metrics"})


@dataclass(frozen=True)
class Decision:
    """An answer for one request: HTTP ``status`` (200, 401, 403, 503) and why."""

    status: int
    reason: str
    user: str = ""


class TokenAuthorizer:
    """Decides requests by TokenReview and SubjectAccessReview through ``client``, cached.

    ``max_entries`` [1024] bounds the cache; the oldest answer goes first.
    """

    def __init__(
        self,
        client: Client,
        *,
        ttl: float = 60.0,
        max_entries: int = 1024,
        logger: KVLogger | None = None,
    ) -> None:
        self.client = client
        self.ttl = ttl
        self.max_entries = max_entries
        self.log = (logger or get_logger(__name__)).bind(component="diagnostics-auth")
        self._cache: OrderedDict[tuple[str, str, str], tuple[float, Decision]] = OrderedDict()
        self.reviews = 0
        """TokenReviews sent (the cache's effect is visible in tests and metrics)."""

    async def decide(self, authorization: str | None, path: str, verb: str) -> Decision:
        """The answer for a request with this ``Authorization`` header."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return Decision(401, "no bearer token: send 'Authorization: Bearer <token>'")
        key = (hashlib.sha256(token.encode()).hexdigest(), path, verb)
        cached = self._cache.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        try:
            decision = await self._review(token, path, verb)
        except Exception as exc:
            if not is_expected(exc):
                raise
            self.log.warning("cannot review a diagnostics request", error=describe_error(exc))
            return Decision(503, "the API server could not review the token; try again")
        self._cache[key] = (time.monotonic() + self.ttl, decision)
        self._cache.move_to_end(key)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        if decision.status != 200:
            self.log.info("diagnostics request refused", user=decision.user, path=path)
        return decision

    async def _review(self, token: str, path: str, verb: str) -> Decision:
        self.reviews += 1
        review = await self.client.create(TOKEN_REVIEWS, {"spec": {"token": token}})
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return Decision(401, "the token was not accepted by the API server")
        user = status.get("user") or {}
        name = str(user.get("username", ""))
        spec = {
            "user": name,
            "uid": str(user.get("uid", "")),
            "groups": list(user.get("groups") or []),
            "extra": dict(user.get("extra") or {}),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        access = await self.client.create(SUBJECT_ACCESS_REVIEWS, {"spec": spec})
        if not (access.get("status") or {}).get("allowed"):
            return Decision(
                403,
                f"user {name} may not {verb} {path}: bind the ClusterRole {METRICS_READER_ROLE}"
                " to it",
                name,
            )
        return Decision(200, "allowed", name)

    def middleware(self, protected: frozenset[str]) -> Middleware:
        """An aiohttp middleware that checks requests to ``protected`` paths."""

        @web.middleware
        async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.path not in protected:
                return await handler(request)
            verb = request.method.lower()
            decision = await self.decide(request.headers.get("Authorization"), request.path, verb)
            if decision.status == 200:
                return await handler(request)
            headers = {"WWW-Authenticate": 'Bearer realm="machinepool"'}
            return web.Response(
                status=decision.status,
                text=f"{decision.reason}\n",
                headers=headers if decision.status == 401 else None,
            )

        return check
