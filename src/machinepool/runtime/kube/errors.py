"""The API errors every layer above the client speaks.

A small tree of our own, so the HTTP library underneath stays replaceable and callers can
write ``except NotFound`` instead of comparing status codes. ``NotFound`` means "gone", which
most reconcilers treat as success, not failure.
"""

from __future__ import annotations

from typing import Any

import aiohttp


class ExpectedError(Exception):
    """A failure that is part of normal operation, not a bug: a cloud call that failed, a
    workload cluster that cannot be reached, a referenced object that is not there yet.

    The controller retries it with backoff like any error but logs it in one line with its
    reason, keeping tracebacks for programming errors (see ``is_expected``). Raise it, or a
    subclass, ``from`` the underlying error with a message saying what was being done.
    """


class ApiError(Exception):
    """A request the Kubernetes API server answered with an error status.

    ``status`` is the HTTP code, ``reason`` the Status object's machine-readable reason
    (``NotFound``, ``Conflict``, ``Invalid`` ...), ``message`` its human-readable message and
    ``body`` the whole Status object when the server sent one.
    """

    def __init__(self, status: int, reason: str, message: str, body: dict[str, Any] | None = None):
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}


class BadRequest(ApiError):
    """400: the request itself is malformed."""


class Unauthorized(ApiError):
    """401: no or wrong credentials."""


class Forbidden(ApiError):
    """403: authenticated, but RBAC or an admission webhook said no."""


class NamespaceTerminating(Forbidden):
    """403 whose Status names the cause ``NamespaceTerminating``: a create in a namespace that
    is being deleted. Nothing new can be made there, and the objects that asked are about to
    go with it, so this is the end of their life, not a fault (client-go's
    ``HasStatusCause(err, NamespaceTerminatingCause)``)."""


class NotFound(ApiError):
    """404: the object (or its kind) does not exist."""


class Conflict(ApiError):
    """409: a resourceVersion precondition failed, or the object already exists."""


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists: create of a name that is taken."""


class Gone(ApiError):
    """410: a watch or list asked for a resourceVersion that was compacted; re-list."""


class Invalid(ApiError):
    """422: validation failed; ``message`` names the fields."""


class TooManyRequests(ApiError):
    """429: the server asks the client to slow down."""


class ServerError(ApiError):
    """5xx: the server (or a webhook behind it) failed; worth retrying."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def error_for(status: int, body: dict[str, Any] | None, text: str = "") -> ApiError:
    """Build the most specific ``ApiError`` for a response status and its Status body."""
    body = body or {}
    reason = str(body.get("reason") or "")
    message = str(body.get("message") or text or "")
    if status == 409 and reason == "AlreadyExists":
        return AlreadyExists(status, reason, message, body)
    if status == 403 and _has_cause(body, "NamespaceTerminating"):
        return NamespaceTerminating(status, "NamespaceTerminating", message, body)
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else ApiError
    return cls(status, reason or cls.__name__, message, body)


def _has_cause(body: dict[str, Any], reason: str) -> bool:
    details = body.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    return isinstance(causes, list) and any(
        isinstance(c, dict) and c.get("reason") == reason for c in causes
    )


def only_namespace_terminating(exc: BaseException) -> bool:
    """True when ``exc`` (or every exception of a group) is ``NamespaceTerminating``."""
    if isinstance(exc, BaseExceptionGroup):
        return all(only_namespace_terminating(e) for e in exc.exceptions)
    return isinstance(exc, NamespaceTerminating)


_NETWORK = (OSError, TimeoutError, aiohttp.ClientError)
"""Connection refused, reset or timed out: the network's weather, not our bug."""


def is_expected(exc: BaseException) -> bool:
    """True for failures normal operation produces (``ApiError``, ``ExpectedError``, network
    errors); an exception group is expected when every exception in it is.

    >>> is_expected(ExceptionGroup("pool ns/a", [NotFound(404, "NotFound", "gone")]))
    True
    >>> is_expected(ExceptionGroup("pool ns/a", [KeyError("spec")]))
    False
    """
    if isinstance(exc, BaseExceptionGroup):
        return all(is_expected(e) for e in exc.exceptions)
    return isinstance(exc, (ApiError, ExpectedError, *_NETWORK))


def error_reason(exc: BaseException) -> str:
    """A short machine-readable reason for a log line: an ``ApiError``'s reason, else the
    exception's type; for a group, that of its first exception."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, ApiError):
        return exc.reason or type(exc).__name__
    return type(exc).__name__


def describe_error(exc: BaseException) -> str:
    """``Type: message (notes)`` on one line; a group's message already names what it
    collected. The notes say where it happened (``runtime.reconcile.phases`` notes the phase)."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = "; ".join(describe_error(e) for e in exc.exceptions)
        return f"{exc.message}: {leaves}" if leaves not in exc.message else exc.message
    text = str(exc) or repr(exc)
    notes = "; ".join(getattr(exc, "__notes__", None) or [])
    where = f" ({notes})" if notes else ""
    return f"{type(exc).__name__}: {text}{where}".replace("\n", " ")
