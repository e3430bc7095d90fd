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
    """``{"ts": ..., "level": ..., "logger": ..., "message": ...}`` per record (plus
    ``"node"`` in a worker process, whose logs share the supervisor's stderr)."""

    def __init__(self, node: str = "") -> None:
        super().__init__()
        self.node = node

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self.node:
            entry["node"] = self.node
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def apply_logging(level: str, json_format: bool, node: str | None = None) -> None:
    """Configure the root logger (at start and again on reload): one stderr handler.

    ``node`` tags every line with the node id (worker processes); it is kept on reload.
    """
    root = logging.getLogger()
    handler = next((h for h in root.handlers if getattr(h, "xmq_handler", False)), None)
    if handler is None:
        handler = logging.StreamHandler(sys.stderr)
        handler.xmq_handler = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    if node is not None:
        handler.xmq_node = node  # type: ignore[attr-defined]
    tag: str = getattr(handler, "xmq_node", "")
    text = TEXT_FORMAT.replace("%(name)s", f"[{tag}] %(name)s") if tag else TEXT_FORMAT
    handler.setFormatter(JsonLogFormatter(tag) if json_format else logging.Formatter(text))
    root.setLevel(level)
