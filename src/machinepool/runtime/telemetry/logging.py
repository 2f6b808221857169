"""Structured logging: key/value context on top of the standard ``logging`` module.

Controllers log through a ``KVLogger`` bound to their context
(``log = get_logger(__name__).bind(controller="machinepool", key="ns/pool")``) and add
per-call pairs (``log.info("scaled", replicas=3)``). ``configure_logging`` (called once by the
CLI or a test) renders those pairs as JSON lines or as ``key=value`` text.

Never pass secret values (tokens, kubeconfigs, bootstrap data) as log values.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

_KV_ATTR = "kv"
ExcInfo = bool | BaseException | None


class KVLogger:
    """A logger carrying key/value context; ``bind`` returns a child with more context."""

    def __init__(self, logger: logging.Logger, context: Mapping[str, Any] | None = None) -> None:
        self.logger = logger
        self.context: dict[str, Any] = dict(context or {})

    def bind(self, **kv: Any) -> KVLogger:
        return KVLogger(self.logger, {**self.context, **kv})

    def _log(self, level: int, msg: str, exc_info: ExcInfo, kv: dict[str, Any]) -> None:
        if self.logger.isEnabledFor(level):
            extra = {_KV_ATTR: {**self.context, **kv}}
            self.logger.log(level, msg, exc_info=exc_info, extra=extra, stacklevel=3)

    def debug(self, msg: str, **kv: Any) -> None:
        self._log(logging.DEBUG, msg, False, kv)

    def info(self, msg: str, **kv: Any) -> None:
        self._log(logging.INFO, msg, False, kv)

    def warning(self, msg: str, **kv: Any) -> None:
        self._log(logging.WARNING, msg, False, kv)

    def error(self, msg: str, *, exc_info: ExcInfo = None, **kv: Any) -> None:
        """Log at ERROR; ``exc_info`` attaches an exception's traceback."""
        self._log(logging.ERROR, msg, exc_info, kv)

    def exception(self, msg: str, **kv: Any) -> None:
        """Log at ERROR with the current exception's traceback."""
        self._log(logging.ERROR, msg, True, kv)


def get_logger(name: str, **kv: Any) -> KVLogger:
    """A ``KVLogger`` over ``logging.getLogger(name)`` with initial context ``kv``."""
    return KVLogger(logging.getLogger(name), kv)


def _pairs(record: logging.LogRecord) -> dict[str, Any]:
    kv = getattr(record, _KV_ATTR, None)
    return dict(kv) if isinstance(kv, dict) else {}


class JSONFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the key/value pairs, and exc."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for k, v in _pairs(record).items():
            doc.setdefault(k, v)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger msg key=value ...``, for humans at a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        pairs = " ".join(f"{k}={_text(v)}" for k, v in _pairs(record).items())
        if not pairs:
            return line
        head, sep, tail = line.partition("\n")  # keep a traceback below the pairs
        return f"{head} {pairs}{sep}{tail}"


def _text(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if (not text or " " in text or '"' in text) else text


def configure_logging(
    level: int | str = logging.INFO, *, fmt: str = "text", stream: TextIO | None = None
) -> logging.Handler:
    """Send the root logger to ``stream`` (stderr) as ``fmt`` (``"json"`` or ``"text"``).

    Replaces handlers an earlier call installed, so calling it twice does not double lines.
    Returns the handler, so a caller can remove it again.
    """
    if fmt not in ("json", "text"):
        raise ValueError(f"log format must be 'json' or 'text', not {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    handler.set_name("machinepool")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "machinepool"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler
