"""Log output: plain text or one JSON object per line, level changeable at runtime.

Events carry their fields in the message (``refused 1.2.3.4:5 (client-id): 0x86 reason``);
the JSON form adds the time, level and logger so log pipelines can index them.
"""

from __future__ import annotations

import json
import logging
import sys
import time

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonLogFormatter(logging.Formatter):
    """``{"ts": ..., "level": ..., "logger": ..., "message": ...}`` per record."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def apply_logging(level: str, json_format: bool) -> None:
    """Configure the root logger (at start and again on reload): one stderr handler."""
    root = logging.getLogger()
    handler = next((h for h in root.handlers if getattr(h, "xmq_handler", False)), None)
    if handler is None:
        handler = logging.StreamHandler(sys.stderr)
        handler.xmq_handler = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    handler.setFormatter(JsonLogFormatter() if json_format else logging.Formatter(TEXT_FORMAT))
    root.setLevel(level)
