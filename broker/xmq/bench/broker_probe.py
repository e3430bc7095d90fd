"""CPU (user + system) and RSS of the broker processes under test, sampled with psutil."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psutil


@dataclass(frozen=True, slots=True)
class ProbeSample:
    cpu_s: tuple[float, ...]
    """Cumulative CPU seconds (user + system) per PID; NaN once the process is gone."""
    rss: tuple[int, ...]
    """Resident set size per PID in bytes; 0 once the process is gone."""
    sys_s: tuple[float, ...] = ()
    """The kernel (system) part of ``cpu_s``."""

    @property
    def total_cpu_s(self) -> float:
        return sum(value for value in self.cpu_s if value == value)

    @property
    def total_sys_s(self) -> float:
        return sum(value for value in self.sys_s if value == value)

    @property
    def total_rss(self) -> int:
        return sum(self.rss)


class BrokerProbe:
    def __init__(self, pids: Sequence[int]) -> None:
        self.pids = tuple(pids)
        self._processes: list[psutil.Process | None] = []
        for pid in self.pids:
            try:
                self._processes.append(psutil.Process(pid))
            except psutil.Error:
                self._processes.append(None)

    def sample(self) -> ProbeSample:
        cpu: list[float] = []
        rss: list[int] = []
        kernel: list[float] = []
        for process in self._processes:
            if process is None:
                cpu.append(float("nan"))
                kernel.append(float("nan"))
                rss.append(0)
                continue
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    memory = process.memory_info()
            except psutil.Error:
                cpu.append(float("nan"))
                kernel.append(float("nan"))
                rss.append(0)
                continue
            cpu.append(times.user + times.system)
            kernel.append(times.system)
            rss.append(memory.rss)
        return ProbeSample(tuple(cpu), tuple(rss), tuple(kernel))

    def alive(self) -> list[bool]:
        return [process is not None and process.is_running() for process in self._processes]
