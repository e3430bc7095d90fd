"""JSON log lines and runtime reconfiguration."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from xmq.observability.log_format import JsonLogFormatter, apply_logging


def test_json_lines_carry_level_logger_and_message() -> None:
    record = logging.LogRecord(
        "xmq.connection", logging.INFO, __file__, 1, "refused %s: 0x%02X", ("1.2.3.4:5", 0x86), None
    )
    entry = json.loads(JsonLogFormatter().format(record))
    assert entry["level"] == "INFO"
    assert entry["logger"] == "xmq.connection"
    assert entry["message"] == "refused 1.2.3.4:5: 0x86"
    assert entry["ts"].endswith("Z")


@pytest.fixture
def restore_root() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def test_apply_logging_switches_in_place(restore_root: logging.Logger) -> None:
    apply_logging("WARNING", json_format=False)
    ours = [h for h in restore_root.handlers if getattr(h, "xmq_handler", False)]
    assert len(ours) == 1
    assert restore_root.level == logging.WARNING
    apply_logging("DEBUG", json_format=True)
    again = [h for h in restore_root.handlers if getattr(h, "xmq_handler", False)]
    assert again == ours  # reconfigured, not duplicated
    assert isinstance(ours[0].formatter, JsonLogFormatter)
    assert restore_root.level == logging.DEBUG
