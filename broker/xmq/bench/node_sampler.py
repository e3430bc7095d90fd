"""Broker CPU and RSS over node processes that come and go, plus Redis, per interval.

The survivability scenario kills a node and starts it again: its PID disappears and a new one
appears. Each interval's broker CPU is the sum, over the processes alive at both ends of the
interval, of their CPU-second deltas (a killed process stops counting; a restarted one counts
from the moment it is added), so the figure never goes negative across the kill.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from xmq.bench.redis_probe import RedisProbe, RedisSample


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """One interval: broker CPU (% of one core, all nodes), RSS, Redis CPU and commands/s."""

    broker_cpu_pct: float
    broker_rss_bytes: int
    redis_cpu_pct: float | None
    redis_ops: float | None


class NodeSampler:
    """Samples a changing set of broker processes and, with a URL, one Redis."""

    def __init__(self, pids: Iterable[int], redis_url: str | None = None) -> None:
        self._processes: dict[int, psutil.Process] = {}
        self._cpu: dict[int, float] = {}
        for pid in pids:
            self.add(pid)
        self._redis = RedisProbe(redis_url) if redis_url else None
        self._redis_last: RedisSample | None = self._redis.sample() if self._redis else None
        self._last = time.monotonic()

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(self._processes)

    def add(self, pid: int) -> None:
        """Start counting a process (a restarted node) from now."""
        try:
            process = psutil.Process(pid)
            times = process.cpu_times()
        except psutil.Error:
            return
        self._processes[pid] = process
        self._cpu[pid] = times.user + times.system

    def sample(self) -> NodeUsage:
        now = time.monotonic()
        span = max(now - self._last, 1e-9)
        self._last = now
        used = 0.0
        rss = 0
        for pid, process in list(self._processes.items()):
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    memory = process.memory_info()
            except psutil.Error:  # killed: it stops counting
                del self._processes[pid]
                del self._cpu[pid]
                continue
            total = times.user + times.system
            used += total - self._cpu[pid]
            self._cpu[pid] = total
            rss += memory.rss
        redis_cpu: float | None = None
        redis_ops: float | None = None
        if self._redis is not None:
            current = self._redis.sample()
            last = self._redis_last
            if current is not None and last is not None:
                redis_cpu = 100.0 * (current.cpu_s - last.cpu_s) / span
                redis_ops = (current.commands - last.commands) / span
            self._redis_last = current
        return NodeUsage(100.0 * used / span, rss, redis_cpu, redis_ops)

    def close(self) -> None:
        if self._redis is not None:
            self._redis.close()
