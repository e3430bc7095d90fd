"""Readiness checks and the event-loop lag probe."""

from __future__ import annotations

import asyncio
from typing import cast

from tests.support.virtual_loop import VirtualLoop
from xmq.observability.readiness import (
    MAX_WINDOW_S,
    CheckResult,
    LoopLagMonitor,
    ReadinessChecks,
)


async def test_checks_report_each_problem() -> None:
    # A tiny timeout: the checks that answer do so within the task step that starts them
    # (before any timer of the loop can run), the one that never answers is cut off by it.
    checks = ReadinessChecks(timeout_s=0.001)

    async def ok() -> str | None:
        return None

    async def down() -> str | None:
        return "redis: connection refused"

    async def hangs() -> str | None:
        await asyncio.Event().wait()  # never answers
        return None

    async def broken() -> str | None:
        raise RuntimeError("boom")

    checks.add("ok", ok)
    assert await checks.run() == [CheckResult("ok", None)]
    checks.add("down", down)
    checks.add("hangs", hangs)
    checks.add("broken", broken)
    async with asyncio.timeout(2):  # only if the hanging check were waited for
        results = {result.name: result.problem for result in await checks.run()}
    assert results == {
        "ok": None,
        "down": "redis: connection refused",
        "hangs": "no answer within 0.001s",
        "broken": "RuntimeError: boom",
    }
    checks.remove("down")
    assert "down" not in checks.names()


class VirtualThread:
    """The loop's clock (a ``VirtualLoop``) and its thread's CPU clock, moved by hand: a
    stall is ``busy`` (the loop's own work: both clocks move) or ``starved`` (waiting for a
    CPU: only the wall clock moves)."""

    def __init__(self) -> None:
        self.loop = VirtualLoop(start=5000.0)
        self.cpu = 0.0

    def thread_time(self) -> float:
        return self.cpu

    def monitor(self, interval_s: float = 0.01) -> LoopLagMonitor:
        monitor = LoopLagMonitor(interval_s, self.loop.time, self.thread_time)
        monitor.start(cast(asyncio.AbstractEventLoop, self.loop))
        return monitor

    def idle(self, seconds: float, step: float = 0.01) -> None:
        """The loop waits for I/O: every timer runs on time."""
        until = self.loop.now + seconds
        while self.loop.now < until - 1e-9:
            self.loop.advance(step)
            self.loop.run_turn()

    def busy(self, seconds: float) -> None:
        """One callback runs ``seconds`` on the CPU: no timer runs meanwhile."""
        self.loop.advance(seconds)
        self.cpu += seconds

    def starved(self, seconds: float) -> None:
        """The thread waits ``seconds`` for a CPU (or blocks in a system call)."""
        self.loop.advance(seconds)


def test_loop_lag_is_measured_when_the_loop_is_blocked() -> None:
    thread = VirtualThread()
    monitor = thread.monitor(interval_s=0.05)
    try:
        thread.idle(0.12)
        assert monitor.lag() < 0.05
        assert monitor.healthy(0.1)
        thread.busy(0.3)
        assert monitor.lag() >= 0.2  # overdue while blocked, before the probe could run
        assert not monitor.healthy(0.1)
        thread.loop.run_turn()  # the probe runs late
        assert monitor.last_lag_s >= 0.2
        assert not monitor.healthy(0.1)
        thread.idle(0.1)
        assert monitor.healthy(0.1)  # on time again
    finally:
        monitor.stop()
    assert thread.loop.pending() == 0


def test_the_10ms_sampler_keeps_the_longest_stall_and_a_histogram() -> None:
    assert LoopLagMonitor().interval_s == 0.01
    thread = VirtualThread()
    monitor = thread.monitor()
    try:
        thread.idle(0.1)
        thread.busy(0.2)
        thread.idle(0.1)  # the probe runs again: the last lag is small again
        assert monitor.last_lag_s < 0.1
        assert monitor.max_lag() >= 0.15  # but the window remembers the stall
        assert 0.15 <= monitor.max_busy() <= 0.2 + 0.01
        histogram = monitor.histogram
        assert histogram.count >= 10
        stalls = sum(histogram.counts[histogram.bounds.index(0.1) + 1 :])
        assert stalls == 1
        thread.idle(MAX_WINDOW_S + 1)  # the window moves past the stall
        assert monitor.max_lag() < 0.1
        assert monitor.max_busy() < 0.1
    finally:
        monitor.stop()


def test_a_stall_spent_off_the_cpu_is_not_counted_as_busy() -> None:
    thread = VirtualThread()
    monitor = thread.monitor()
    try:
        thread.idle(0.05)
        thread.starved(0.3)
        thread.idle(0.05)
        assert monitor.max_lag() >= 0.25
        assert monitor.max_busy() < 0.1
    finally:
        monitor.stop()
