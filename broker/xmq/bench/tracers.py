"""Counting a broker's work in units a noisy machine does not change: instructions and system calls.

Two tracers, each switched on when a run's measured window opens (every client connected and
subscribed) and read when it closes (every delivery arrived):

- ``Callgrind`` runs the broker under ``valgrind --tool=callgrind --instr-atstart=no`` (start-up
  runs uninstrumented, so it is quick), turns instrumentation on with ``callgrind_control -i on``
  and reads the user-space instructions (``Ir``) of the window from a ``callgrind_control -d``
  dump;
- ``Strace`` attaches ``strace -c -f`` to the running broker (every thread) for the window and
  reads its summary table.

A figure per delivery is the difference of two runs, one with N deliveries and one with N/2,
divided by the difference in deliveries (``per_unit``): whatever a run costs regardless of its
size (connecting the clients, the window's edges, the dump itself) cancels out.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

_TOTALS = re.compile(r"^(?:totals|summary):\s+(\d+)", re.MULTILINE)
_STRACE_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+(?:\d+\s+)?(\d+)\s+(?:(\d+)\s+)?([a-z_0-9]+)\s*$")


class TracerError(RuntimeError):
    """A tracer could not be attached or its output could not be read."""


def parse_callgrind_total(text: str) -> int:
    """The instruction total of one callgrind output file (``totals:``, else ``summary:``)."""
    for line in text.splitlines():
        if line.startswith("events:") and line.split()[1:2] != ["Ir"]:
            raise TracerError(f"callgrind output does not count Ir first: {line!r}")
    match = _TOTALS.search(text)
    if match is None:
        raise TracerError("no totals: or summary: line in the callgrind output")
    return int(match.group(1))


@dataclass(frozen=True, slots=True)
class SyscallCounts:
    """One ``strace -c`` table: calls (and failed calls) per system call."""

    calls: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    def __add__(self, other: SyscallCounts) -> SyscallCounts:
        calls = dict(self.calls)
        errors = dict(self.errors)
        for name, count in other.calls.items():
            calls[name] = calls.get(name, 0) + count
        for name, count in other.errors.items():
            errors[name] = errors.get(name, 0) + count
        return SyscallCounts(calls, errors)


def parse_strace_summary(text: str) -> SyscallCounts:
    """The rows of an ``strace -c`` table (the ``total`` row is checked, not kept)."""
    calls: dict[str, int] = {}
    errors: dict[str, int] = {}
    total: int | None = None
    seen_header = False
    for line in text.splitlines():
        if line.lstrip().startswith("% time"):
            seen_header = True
            continue
        match = _STRACE_ROW.match(line)
        if not seen_header or match is None:
            continue
        count, failed, name = int(match.group(1)), int(match.group(2) or 0), match.group(3)
        if name == "total":
            total = count
            continue
        calls[name] = calls.get(name, 0) + count
        if failed:
            errors[name] = errors.get(name, 0) + failed
    if not seen_header:
        raise TracerError("no strace -c table in the output")
    if total is not None and total != sum(calls.values()):
        raise TracerError(f"strace rows sum to {sum(calls.values())}, its total says {total}")
    return SyscallCounts(calls, errors)


def count_instructions(argv: Sequence[str], out: Path) -> int:
    """User-space instructions of one whole run of ``argv`` under callgrind (``PYTHONHASHSEED``
    fixed); two runs of different sizes give a cost per unit (``per_unit``)."""
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--quiet", f"--callgrind-out-file={out}", *argv],
        check=True,
        env=dict(os.environ, PYTHONHASHSEED="0"),
    )
    return parse_callgrind_total(out.read_text())


def per_unit(full: float, half: float, full_units: int, half_units: int) -> float:
    """(I(N) - I(N/2)) / (N - N/2): the cost of one more unit, fixed costs cancelled."""
    if full_units <= half_units:
        raise ValueError(f"the larger run has {full_units} units, the smaller {half_units}")
    return (full - half) / (full_units - half_units)


class Callgrind:
    """Brokers under callgrind; ``wrap`` their command, ``open``/``close`` the window."""

    name = "callgrind"

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self._dumps = 0

    def wrap(self, argv: Sequence[str]) -> list[str]:
        return [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--quiet",
            f"--callgrind-out-file={self.out_dir}/callgrind.out.%p",
            *argv,
        ]

    def open(self, pids: Sequence[int]) -> None:
        for pid in pids:
            _control(["-i", "on", str(pid)])

    def close(self, pids: Sequence[int]) -> int:
        """Dump every broker and sum their instructions since ``open``."""
        total = 0
        for pid in pids:
            before = set(self.out_dir.glob(f"callgrind.out.{pid}.*"))
            _control(["-d", str(pid)])
            _control(["-i", "off", str(pid)])
            dump = _wait_for_new(self.out_dir, f"callgrind.out.{pid}.*", before)
            total += parse_callgrind_total(dump.read_text())
        return total


def _control(args: list[str]) -> None:
    done = subprocess.run(
        ["callgrind_control", *args], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0 or "Error" in done.stdout:
        raise TracerError(f"callgrind_control {' '.join(args)}: {done.stdout}{done.stderr}")


def _wait_for_new(directory: Path, pattern: str, before: set[Path]) -> Path:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        new = sorted(set(directory.glob(pattern)) - before)
        if new and "totals:" in new[-1].read_text():
            return new[-1]
        time.sleep(0.1)
    raise TracerError(f"no new {pattern} dump in {directory}")


class Strace:
    """``strace -c -f -p`` attached to each broker for the window."""

    name = "strace"

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self._tracers: list[tuple[subprocess.Popen[bytes], Path]] = []

    def wrap(self, argv: Sequence[str]) -> list[str]:
        return list(argv)

    def open(self, pids: Sequence[int]) -> None:
        for pid in pids:
            out = self.out_dir / f"strace.{pid}.{len(self._tracers)}"
            err = out.with_suffix(out.suffix + ".err")
            with err.open("wb") as stderr:
                tracer = subprocess.Popen(
                    ["strace", "-c", "-f", "-o", str(out), "-p", str(pid)], stderr=stderr
                )
            self._tracers.append((tracer, out))
            deadline = time.monotonic() + 30
            while "attached" not in err.read_text(errors="replace"):
                if tracer.poll() is not None or time.monotonic() > deadline:
                    raise TracerError(f"strace -p {pid}: {err.read_text(errors='replace')}")
                time.sleep(0.05)

    def close(self, pids: Sequence[int]) -> SyscallCounts:
        """Detach every tracer (SIGINT prints the table) and sum their tables."""
        counts = SyscallCounts()
        for tracer, out in self._tracers:
            tracer.send_signal(signal.SIGINT)
            tracer.wait(timeout=60)
            counts = counts + parse_strace_summary(out.read_text())
        self._tracers.clear()
        return counts
