"""Readiness checks and the event-loop lag probe."""

from __future__ import annotations

import asyncio
import time

from xmq.observability.readiness import CheckResult, LoopLagMonitor, ReadinessChecks


async def test_checks_report_each_problem() -> None:
    checks = ReadinessChecks(timeout_s=0.2)

    async def ok() -> str | None:
        return None

    async def down() -> str | None:
        return "redis: connection refused"

    async def hangs() -> str | None:
        await asyncio.sleep(10)
        return None

    async def broken() -> str | None:
        raise RuntimeError("boom")

    checks.add("ok", ok)
    assert await checks.run() == [CheckResult("ok", None)]
    checks.add("down", down)
    checks.add("hangs", hangs)
    checks.add("broken", broken)
    started = time.monotonic()
    results = {result.name: result.problem for result in await checks.run()}
    assert time.monotonic() - started < 2
    assert results == {
        "ok": None,
        "down": "redis: connection refused",
        "hangs": "no answer within 0.2s",
        "broken": "RuntimeError: boom",
    }
    checks.remove("down")
    assert "down" not in checks.names()


async def test_loop_lag_is_measured_when_the_loop_is_blocked() -> None:
    monitor = LoopLagMonitor(interval_s=0.05)
    monitor.start()
    try:
        await asyncio.sleep(0.12)
        assert monitor.lag() < 0.05
        assert monitor.healthy(0.1)
        _block_the_loop(0.3)
        assert monitor.lag() >= 0.2  # overdue while blocked
        await asyncio.sleep(0.01)
        assert monitor.last_lag_s >= 0.2
        assert not monitor.healthy(0.1)
    finally:
        monitor.stop()


def _block_the_loop(seconds: float) -> None:
    """Busy work on the loop's thread, as a slow callback would do."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass


async def test_the_10ms_sampler_keeps_the_longest_stall_and_a_histogram() -> None:
    monitor = LoopLagMonitor()
    assert monitor.interval_s == 0.01
    monitor.start()
    try:
        await asyncio.sleep(0.1)
        _block_the_loop(0.2)
        await asyncio.sleep(0.1)  # the probe runs again: the last lag is small again
        assert monitor.last_lag_s < 0.1
        assert monitor.max_lag() >= 0.15  # but the window remembers the stall
        assert monitor.max_busy() < 0.2 + 0.02
        started = time.thread_time()
        while time.thread_time() - started < 0.1:  # 0.1 s of CPU, however long that takes
            pass
        await asyncio.sleep(0.05)
        assert monitor.max_busy() >= 0.09  # the loop's own work, measured in CPU time
        histogram = monitor.histogram
        assert histogram.count >= 10
        stalls = sum(histogram.counts[histogram.bounds.index(0.1) + 1 :])
        assert stalls >= 1
    finally:
        monitor.stop()


async def test_a_stall_spent_off_the_cpu_is_not_counted_as_busy() -> None:
    monitor = LoopLagMonitor()
    monitor.start()
    try:
        await asyncio.sleep(0.05)
        time.sleep(0.3)  # noqa: ASYNC251 - the loop blocked off the CPU, as when starved
        await asyncio.sleep(0.05)
        assert monitor.max_lag() >= 0.25
        assert monitor.max_busy() < 0.1
    finally:
        monitor.stop()
