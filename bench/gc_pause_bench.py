"""What one full cyclic garbage collection costs with the memory budget full of queued messages.

``BrokerNode`` runs ``gc.collect()`` every ``FULL_COLLECTION_INTERVAL_S`` (app/server.py); it
walks every object the collector tracks, so its pause grows with what the queues hold.
This fills the offline queues up to a memory budget, in process, as the broker would:
``tune_garbage_collector()`` first (as at start), then one-byte QoS 1 messages

- ``fanout``: each fanned out to ``--sessions`` offline sessions (``Session.deliver`` per
  session, as a fan-out's slices do) — the measurement in docs/security.md;
- ``p2p``: each to one offline session in turn (one message per queued delivery);

until the budget refuses one. Then it times ``gc.collect()`` (CPU and wall clock, best and
worst of ``--repeats``) and counts the tracked objects.

Run: .venv/bin/python bench/gc_pause_bench.py [--budgets-mib 32 64 512] [--shape fanout]
Before/after: PYTHONPATH=<other tree>/broker .venv/bin/python bench/gc_pause_bench.py
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path

from xmq.app.server import tune_garbage_collector
from xmq.core.message import Message
from xmq.core.session import QueueLimits, Session
from xmq.core.stats import BrokerStats

MIB = 1 << 20
MAX_MESSAGES = 10_000  # the default per-session limits (core.settings)
MAX_SESSION_BYTES = 16 * MIB
MAX_INFLIGHT = 1024


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _fill(budget: int, sessions: list[Session], stats: BrokerStats, shape: str) -> int:
    """Queue one-byte messages until the budget refuses one; return how many were sent."""
    sent = 0
    while True:
        message = Message(f"bcast/{sent}", b"x", 1, False, None, "publisher", 0.0)
        sent += 1
        if shape == "fanout":
            for session in sessions:
                session.deliver(message, 1, False)
        elif not sessions[sent % len(sessions)].deliver(message, 1, False):
            return sent
        if stats.quota_drops:
            return sent


def _time_collections(repeats: int) -> tuple[list[float], list[float]]:
    cpu: list[float] = []
    wall: list[float] = []
    for _ in range(repeats):
        cpu_start = time.process_time()
        start = time.perf_counter()
        gc.collect()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    return cpu, wall


def run(budget_mib: int, shape: str, count: int, repeats: int) -> None:
    stats = BrokerStats()
    limits = QueueLimits(MAX_MESSAGES, MAX_SESSION_BYTES, budget_mib * MIB, MAX_INFLIGHT)
    sessions = [Session(f"offline-{n}", limits, stats, expiry_s=3600) for n in range(count)]
    rss_before = _rss_mib()
    started = time.perf_counter()
    messages = _fill(budget_mib * MIB, sessions, stats, shape)
    filled_s = time.perf_counter() - started
    queued = sum(len(session.queue) for session in sessions)
    gc.collect()
    tracked = len(gc.get_objects())
    cpu, wall = _time_collections(repeats)
    print(
        f"{shape:6} budget {budget_mib:4} MiB: {queued:>10,} queued deliveries of "
        f"{messages:>9,} messages, {tracked:>9,} tracked objects, "
        f"RSS +{_rss_mib() - rss_before:6.0f} MiB (filled in {filled_s:5.1f} s) | "
        f"gc.collect() CPU {1000 * min(cpu):6.1f}-{1000 * max(cpu):6.1f} ms, "
        f"wall {1000 * min(wall):6.1f}-{1000 * max(wall):6.1f} ms",
        flush=True,
    )
    for session in sessions:
        session.discard_queue()
    del sessions
    gc.collect()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets-mib", type=int, nargs="+", default=[32, 64, 512])
    parser.add_argument("--shape", choices=("fanout", "p2p"), nargs="+", default=["fanout"])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tune_garbage_collector()
    for shape in args.shape:
        for budget in args.budgets_mib:
            run(budget, shape, args.sessions, args.repeats)


if __name__ == "__main__":
    main()
