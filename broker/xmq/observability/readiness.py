"""Liveness and readiness: the event-loop lag probe and the registry of readiness checks.

``/healthz`` answers from the loop itself (so an answer proves the loop runs) and fails when
the lag probe has not run for a while or the lag is too high. ``/readyz`` runs every
registered check (listening, draining, and whatever the app adds: Redis, PostgreSQL, cluster
membership); each check is an async callable returning ``None`` when ready or a reason.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from xmq.core.stats import LatencyHistogram

ReadinessCheck = Callable[[], Awaitable[str | None]]
"""Returns ``None`` when ready, else a short reason (``"redis: connection refused"``)."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    problem: str | None


class ReadinessChecks:
    """Named readiness checks; adapters' checks are registered by the composition root."""

    def __init__(self, timeout_s: float = 2.0) -> None:
        self.timeout_s = timeout_s
        self._checks: dict[str, ReadinessCheck] = {}

    def add(self, name: str, check: ReadinessCheck) -> None:
        self._checks[name] = check

    def remove(self, name: str) -> None:
        self._checks.pop(name, None)

    def names(self) -> list[str]:
        return list(self._checks)

    async def run(self) -> list[CheckResult]:
        names = list(self._checks)
        outcomes = await asyncio.gather(
            *(self._run_one(self._checks[name]) for name in names), return_exceptions=False
        )
        return [CheckResult(name, problem) for name, problem in zip(names, outcomes, strict=True)]

    async def _run_one(self, check: ReadinessCheck) -> str | None:
        try:
            async with asyncio.timeout(self.timeout_s):
                return await check()
        except TimeoutError:
            return f"no answer within {self.timeout_s:g}s"
        except Exception as error:  # a failing check means "not ready", never a crash
            return f"{type(error).__name__}: {error}"


LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (seconds) of the event-loop lag histogram."""

MAX_WINDOW_S = 10
"""``max_lag()`` is the largest lag measured over this many last seconds."""


class LoopLagMonitor:
    """Measures how late the loop runs a callback scheduled every ``interval_s`` seconds.

    Sampled every 10 ms by default, so any stall longer than that is seen: ``lag()`` is the
    last sample (or how overdue the probe is), ``max_lag()`` the largest of the last
    ``MAX_WINDOW_S`` seconds and ``histogram`` counts every sample. ``max_busy()`` is the part
    of those stalls the loop's thread spent on the CPU (``time.thread_time``): on a host short
    of CPU a stall can be the scheduler's, not the broker's work.

    ``monotonic`` and ``thread_time`` are the clocks it reads (the real ones unless a test
    passes virtual ones); ``start(loop)`` takes the loop to schedule on (the running one by
    default).
    """

    __slots__ = (
        "_cpu",
        "_handle",
        "_loop",
        "_maxima",
        "_monotonic",
        "_thread_time",
        "histogram",
        "interval_s",
        "last_lag_s",
        "last_run",
    )

    def __init__(
        self,
        interval_s: float = 0.01,
        monotonic: Callable[[], float] = time.monotonic,
        thread_time: Callable[[], float] = time.thread_time,
    ) -> None:
        self.interval_s = interval_s
        self._monotonic = monotonic
        self._thread_time = thread_time
        self.last_lag_s = 0.0
        self.last_run = monotonic()
        self.histogram = LatencyHistogram(LAG_BUCKETS)
        self._maxima = [(0, 0.0, 0.0)] * MAX_WINDOW_S  # (second, largest lag, largest busy)
        self._cpu = thread_time()
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = asyncio.get_running_loop() if loop is None else loop
        self._schedule()

    def _schedule(self) -> None:
        assert self._loop is not None
        due = self._loop.time() + self.interval_s
        self._handle = self._loop.call_at(due, self._tick, due)

    def _tick(self, due: float) -> None:
        assert self._loop is not None
        lag = max(0.0, self._loop.time() - due)
        self.last_lag_s = lag
        self.last_run = now = self._monotonic()
        self.histogram.observe(lag)
        cpu = self._thread_time()
        busy = min(lag, cpu - self._cpu)
        self._cpu = cpu
        second = int(now)
        slot = second % MAX_WINDOW_S
        seen, largest, busiest = self._maxima[slot]
        if seen != second:
            self._maxima[slot] = (second, lag, busy)
        elif lag > largest or busy > busiest:
            self._maxima[slot] = (second, max(lag, largest), max(busy, busiest))
        self._schedule()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def lag(self) -> float:
        """The last lag measured, or how overdue the probe is if it has not run."""
        overdue = self._monotonic() - self.last_run - self.interval_s
        return max(self.last_lag_s, overdue, 0.0)

    def max_lag(self) -> float:
        """The largest lag of the last ``MAX_WINDOW_S`` seconds (an overdue probe included)."""
        oldest = int(self._monotonic()) - MAX_WINDOW_S
        recent = [lag for second, lag, _ in self._maxima if second > oldest]
        return max([self.lag(), *recent])

    def max_busy(self) -> float:
        """Of the stalls of the last ``MAX_WINDOW_S`` seconds, the most CPU time the loop's
        thread spent between two probes (its own work, as opposed to waiting for a CPU)."""
        oldest = int(self._monotonic()) - MAX_WINDOW_S
        return max([0.0, *(busy for second, _, busy in self._maxima if second > oldest)])

    def healthy(self, max_lag_s: float) -> bool:
        return self.lag() <= max_lag_s
