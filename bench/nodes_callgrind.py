"""Callgrind over every node of a run at once, and a dump's instructions by event-loop phase.

``NodesCallgrind`` switches every node on, and dumps every node, concurrently; ``LoopParts``
holds what the libuv phases (timers, I/O callbacks, scheduled callbacks) ran in a window.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from xmq.bench.tracers import (
    Callgrind,
    Strace,
    TracerError,
    _wait_for_new,
    parse_callgrind_total,
)


class NodesCallgrind(Callgrind):
    """``Callgrind`` switching every node on, and dumping every node, at once: one
    ``callgrind_control`` takes a second or more of a busy machine, so one node after the
    other, a cluster's windows would not span the same seconds.

    It also reads, from each dump, the instructions run by the event loop's timers
    (``uv__run_timers``, inclusive): the periodic work — lease renewal, link heartbeats and
    watchdogs, the keep-alive wheel, ~90 callbacks a second for a cluster node, ~1.2-1.5 M
    instructions a second under callgrind — re-arms itself after it runs, so a process
    starved by a busy machine runs less of it per second, by more than the messages cost:
    it does not cancel between two runs even in windows of the same length (issue 15,
    session 14). The figure per message is the difference of what remains."""

    def __init__(self, out_dir: Path) -> None:
        super().__init__(out_dir)
        self.loop_parts = LoopParts()
        """The last window's instructions by kind of event-loop callback (every node)."""

    def open(self, pids: Sequence[int]) -> None:
        _control_all(["-i", "on"], pids)

    def close(self, pids: Sequence[int]) -> int:
        before = {pid: set(self.out_dir.glob(f"callgrind.out.{pid}.*")) for pid in pids}
        _control_all(["-d"], pids)
        _control_all(["-i", "off"], pids)
        total = 0
        self.loop_parts = LoopParts()
        for pid in pids:
            dump = _wait_for_new(self.out_dir, f"callgrind.out.{pid}.*", before[pid])
            total += parse_callgrind_total(dump.read_text())
            self.loop_parts = self.loop_parts + _loop_parts(dump)
        return total


@dataclass(frozen=True, slots=True)
class LoopParts:
    """Instructions of a window by the libuv phase that ran them (inclusive): timer
    callbacks (``uv__run_timers``: the periodic work), I/O callbacks (``uv__io_poll``: the
    reads of clients and links, where a message's work is done) and scheduled callbacks
    (``uv__run_idle``: what ``call_soon`` runs — a message's deferred work, and the tasks
    the timers wake)."""

    timers: int = 0
    io: int = 0
    scheduled: int = 0

    def __add__(self, other: LoopParts) -> LoopParts:
        return LoopParts(
            self.timers + other.timers, self.io + other.io, self.scheduled + other.scheduled
        )


_PHASE = re.compile(
    r"^\s*([\d,]+) \([^)]*\)\s+\S*:(uv__run_timers|uv__io_poll|uv__run_idle) \[", re.MULTILINE
)


def _loop_parts(dump: Path) -> LoopParts:
    """The phases' inclusive instructions in a callgrind dump (0: a phase not run)."""
    done = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    found: dict[str, int] = {}
    for match in _PHASE.finditer(done.stdout):
        found.setdefault(match.group(2), int(match.group(1).replace(",", "")))
    return LoopParts(
        found.get("uv__run_timers", 0), found.get("uv__io_poll", 0), found.get("uv__run_idle", 0)
    )


def _control_all(args: list[str], pids: Sequence[int]) -> None:
    """``callgrind_control args pid`` for every pid, concurrently."""
    running = [
        (
            subprocess.Popen(
                ["callgrind_control", *args, str(pid)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
            pid,
        )
        for pid in pids
    ]
    for process, pid in running:
        try:
            out, err = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        if process.returncode != 0 or "Error" in out:
            raise TracerError(f"callgrind_control {' '.join(args)} {pid}: {out}{err}")


Tracer = Callgrind | Strace
