"""Structured logs carry their key/value context in both formats."""

from __future__ import annotations

import io
import json
import logging

import pytest

from machinepool.runtime import configure_logging, get_logger


@pytest.fixture
def restore_root() -> object:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("restore_root")
def test_json_lines_carry_bound_and_call_context() -> None:
    out = io.StringIO()
    configure_logging("DEBUG", fmt="json", stream=out)
    configure_logging("DEBUG", fmt="json", stream=out)  # twice: still one line per record
    log = get_logger("t").bind(controller="machinepool", key="ns/a")
    log.info("scaled", replicas=3)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert doc["msg"] == "scaled"
    assert doc["level"] == "info"
    assert (doc["controller"], doc["key"], doc["replicas"]) == ("machinepool", "ns/a", 3)


@pytest.mark.usefixtures("restore_root")
def test_text_lines_and_tracebacks() -> None:
    out = io.StringIO()
    configure_logging("INFO", fmt="text", stream=out)
    log = get_logger("t", controller="c")
    try:
        raise ValueError("boom")
    except ValueError as exc:
        log.error("failed", exc_info=exc, key="ns/a b")
    text = out.getvalue()
    assert 'failed controller=c key="ns/a b"' in text
    assert "ValueError: boom" in text


def test_unknown_format_is_rejected() -> None:
    with pytest.raises(ValueError, match="json"):
        configure_logging(fmt="xml")
