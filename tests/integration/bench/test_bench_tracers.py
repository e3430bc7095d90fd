"""The run's measure window and a tracer on a real Mosquitto: set-up stays outside the window,
every delivery inside it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from xmq.bench.mosquitto import MosquittoProcess, find_mosquitto
from xmq.bench.plan import Target
from xmq.bench.runner import run_plan
from xmq.bench.scenarios import CommonOptions, p2p
from xmq.bench.tracers import Strace, SyscallCounts

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(find_mosquitto() is None, reason="mosquitto missing: scripts/setup-system"),
    pytest.mark.skipif(shutil.which("strace") is None, reason="strace missing"),
]


class _StraceWindow:
    def __init__(self, tracer: Strace, pid: int) -> None:
        self.tracer = tracer
        self.pid = pid
        self.events: list[str] = []
        self.counts: SyscallCounts | None = None

    def opened(self) -> None:
        self.events.append("opened")
        self.tracer.open([self.pid])

    def closed(self) -> None:
        self.events.append("closed")
        self.counts = self.tracer.close([self.pid])


def test_strace_window_holds_the_messages_and_not_the_connects(tmp_path: Path) -> None:
    options = CommonOptions(duration_s=2.0, warmup_s=0.0, drain_s=10.0, interval_s=0.5)
    with MosquittoProcess() as mosquitto:
        plan = p2p(Target("127.0.0.1", mosquitto.port, "mosquitto"), options, pairs=20, rate=100)
        window = _StraceWindow(Strace(tmp_path), mosquitto.pid)
        result = run_plan(plan, options, label="mosquitto", window=window)
    assert window.events == ["opened", "closed"]
    assert result.account is not None and result.account.lost == 0
    delivered = result.account.received
    assert delivered == 200
    counts = window.counts
    assert counts is not None
    # every message in: a PUBLISH read and a PUBACK written; out: a PUBLISH written, a PUBACK
    # read; the 40 clients connected (accept) before the window opened
    assert counts.calls.get("write", 0) >= 2 * delivered
    assert counts.calls.get("read", 0) >= 2 * delivered
    assert counts.calls.get("accept", 0) + counts.calls.get("accept4", 0) == 0
