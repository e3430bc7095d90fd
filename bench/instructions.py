"""User-space instructions and system calls per delivery, XMQ and Mosquitto, in one invocation.

Every scenario runs the broker (each node of a cluster) under ``valgrind --tool=callgrind``,
once with N deliveries and once with N/2 over the same time (at half the rate), and reports
(I(N) - I(N/2)) / (N - N/2): fixed costs cancel out, and what a broker does per second
whatever it carries (timers, lease renewals: ~1.3 M instructions/s for an idle node) would if
it ran at a fixed rate — the two windows
are open for the same seconds (``Scenario.tail_s`` after the publishing ends, every node's
switched on and dumped at once), not until each run's last delivery. Under callgrind the
headline is the difference in the event loop's I/O callbacks, with its scheduled callbacks
beside it (``NodesCallgrind``, ``LoopParts``): the periodic work is most of an idle node's
and does not run at a fixed rate.
Then the same two runs with ``strace -c -f`` attached for the system calls. The load is the
``xmq bench`` client (one worker process, not traced); the tracers are switched on once every
client is connected and subscribed (``xmq.bench.tracers``).
The counts outside timers depend little on what else the machine runs (a run that falls
late, flagged ``behind``, reads several messages at a time: cheaper per message); a run under
callgrind is ~50x slower, so the rates are low and runs are short.

Scenarios (QoS 1, MQTT 5, 16-byte payload):
  fanout     5 publishers on 5 topics, S subscribers on all; unit: a delivery
  p2p        P pairs, one topic each; unit: a message (in and out)
  cross-node p2p with publishers on node 1 and subscribers on node 2 (two XMQ nodes, Redis);
             unit: a message, instructions of both nodes summed
  durable    p2p with persistent sessions, ``max_queued_writes: 0``, one node, Redis
  connect    C clean-session clients connecting (CONNECT, CONNACK; held, closed after the
             window); unit: a client
Mosquitto has no cluster and no durable store: cross-node and durable are XMQ only.

    .venv/bin/python bench/instructions.py [--scenario fanout --scenario p2p ...]
        [--tracer callgrind --tracer strace] [--broker xmq --broker mosquitto] [--scale 1.0]
        [--json PATH]

The parts beside this file: instruction_scenarios (what is measured), instruction_runs (one
traced run: its brokers, its window) and nodes_callgrind (callgrind on every node at once).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

if not __package__:  # run as a file (python bench/instructions.py): the modules beside it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from bench.instruction_runs import Run, redis_server, run_once  # noqa: E402
from bench.instruction_scenarios import SCENARIOS, Scenario  # noqa: E402
from bench.nodes_callgrind import NodesCallgrind, Tracer  # noqa: E402
from xmq.bench.tracers import Strace, SyscallCounts, per_unit  # noqa: E402
from xmq.native_build import BUILD  # noqa: E402  (the brokers started here import the same tree)

_BEHIND_US = 50_000.0
"""A run whose end-to-end p99 is above this was late somewhere (the broker under callgrind, or
the load client on a busy machine): messages may have shared loop turns. Flagged."""


def _outside_timers(full: Run, half: Run) -> float:
    """Instructions per unit outside timer callbacks (``NodesCallgrind``)."""
    assert isinstance(full.value, int) and isinstance(half.value, int)
    return per_unit(
        full.value - full.loop_parts.timers,
        half.value - half.loop_parts.timers,
        full.units,
        half.units,
    )


def _phases(full: Run, half: Run) -> tuple[float, float]:
    """Per unit in I/O callbacks and in scheduled callbacks (``LoopParts``)."""
    io = per_unit(full.loop_parts.io, half.loop_parts.io, full.units, half.units)
    scheduled = per_unit(
        full.loop_parts.scheduled, half.loop_parts.scheduled, full.units, half.units
    )
    return io, scheduled


def _values(full: Run, half: Run) -> tuple[float, dict[str, float]]:
    if isinstance(full.value, SyscallCounts) and isinstance(half.value, SyscallCounts):
        names = set(full.value.calls) | set(half.value.calls)
        each = {
            name: per_unit(
                full.value.calls.get(name, 0), half.value.calls.get(name, 0), full.units, half.units
            )
            for name in names
        }
        return per_unit(full.value.total, half.value.total, full.units, half.units), each
    assert isinstance(full.value, int) and isinstance(half.value, int)
    return per_unit(full.value, half.value, full.units, half.units), {}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--tracer", action="append", choices=["callgrind", "strace"])
    parser.add_argument("--broker", action="append", choices=["xmq", "mosquitto"])
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every N")
    parser.add_argument("--json", help="append one JSON line per scenario, broker and tracer")
    parser.add_argument("--keep", help="keep the callgrind dumps and logs in this directory")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the brokers on the way out
    for tool in ("valgrind", "callgrind_control", "strace", "redis-server"):
        if shutil.which(tool) is None:
            parser.error(f"{tool} not found: run scripts/setup-system")
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="xmq-instr-") as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        with redis_server(work) as redis_url:
            for name in args.scenario or list(SCENARIOS):
                scenario = SCENARIOS[name]
                for broker in args.broker or ["xmq", "mosquitto"]:
                    if broker == "mosquitto" and not scenario.mosquitto:
                        rows.append(
                            f"| {name} | mosquitto | no equivalent (no cluster, no "
                            "durable store) | | | |"
                        )
                        continue
                    rows.append(_measure(scenario, broker, args, work, redis_url))
                    print(rows[-1], flush=True)
    print(
        "\n| scenario | broker | N | instructions per unit | system calls per unit | "
        "most frequent (per unit) |"
    )
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


def _measure(
    scenario: Scenario, broker: str, args: argparse.Namespace, work: Path, redis_url: str
) -> str:
    units = max(2, math.ceil(scenario.units * args.scale))
    cells: dict[str, str] = {"callgrind": "", "strace": "", "top": ""}
    for tracer_name in args.tracer or ["callgrind", "strace"]:
        tracer: Tracer = NodesCallgrind(work) if tracer_name == "callgrind" else Strace(work)
        # The same duration at half the rate: what a broker does per second whatever it
        # carries (timers, lease renewals) cancels out with the fixed costs.
        duration = units / scenario.rate
        full = run_once(scenario, broker, tracer, units, duration, work, redis_url)
        redis.Redis.from_url(redis_url).flushall()
        half = run_once(scenario, broker, tracer, units // 2, duration, work, redis_url)
        redis.Redis.from_url(redis_url).flushall()
        value, each = _values(full, half)
        outside = _outside_timers(full, half) if tracer_name == "callgrind" else value
        notes = []
        if full.missing + half.missing:
            notes.append(f"{full.missing + half.missing} missing")
        if full.overran or half.overran:
            notes.append(
                f"overran: windows {full.window_s:.1f} / {half.window_s:.1f} s, "
                "per-second work not cancelled"
            )
        if max(full.p99_us, half.p99_us) > _BEHIND_US:
            notes.append(f"behind: p99 {max(full.p99_us, half.p99_us) / 1000:.0f} ms")
        note = f" ({', '.join(notes)})" if notes else ""
        # Under callgrind the I/O callbacks lead: a message's work is done in the reads, and
        # two runs of one tree agree on them within a few percent; the scheduled callbacks
        # (beside them: work a change defers to ``call_soon`` shows there) also run the tasks
        # the timers wake, ~2,000 per message apart between two runs (session 14, cross18).
        io, scheduled = _phases(full, half) if tracer_name == "callgrind" else (0.0, 0.0)
        phases = f"I/O callbacks {io:,.0f}, scheduled {scheduled:,.0f}"
        cells[tracer_name] = (
            f"{io:,.0f} in I/O callbacks (scheduled {scheduled:,.0f}; outside timers "
            f"{outside:,.0f}; whole {value:,.0f}){note}"
            if tracer_name == "callgrind"
            else f"{value:.2f}{note}"
        )
        if each:
            top = sorted(each.items(), key=lambda item: -item[1])[:5]
            cells["top"] = ", ".join(f"{n} {v:.2f}" for n, v in top)
        if args.json:
            record = {
                "scenario": scenario.name,
                "broker": broker,
                "tracer": tracer_name,
                "build": BUILD if broker == "xmq" else None,
                "per_unit": value,
                "per_unit_outside_timers": outside,
                "per_unit_io_callbacks": io,
                "per_unit_scheduled_callbacks": scheduled,
                "per_unit_syscalls": each,
                "runs": [
                    {
                        "units": run.units,
                        "missing": run.missing,
                        "seconds": round(run.seconds, 1),
                        "p99_ms": round(run.p99_us / 1000, 2),
                        "window_s": round(run.window_s, 2),
                        "timers": run.loop_parts.timers,
                        "io_callbacks": run.loop_parts.io,
                        "scheduled_callbacks": run.loop_parts.scheduled,
                        "value": run.value
                        if isinstance(run.value, int)
                        else {"total": run.value.total, "calls": run.value.calls},
                    }
                    for run in (full, half)
                ],
            }
            with open(args.json, "a") as out:
                out.write(json.dumps(record) + "\n")
        print(
            f"# {scenario.name} {broker}{f' ({BUILD} build)' if broker == 'xmq' else ''} "
            f"{tracer_name}: N={full.units} ({full.seconds:.0f} s), "
            f"N/2={half.units} ({half.seconds:.0f} s), windows {full.window_s:.1f} / "
            f"{half.window_s:.1f} s: {value:,.2f} per unit, {outside:,.2f} outside timers"
            f"{f' ({phases})' if tracer_name == 'callgrind' else ''}; p99 "
            f"{full.p99_us / 1000:.1f} / {half.p99_us / 1000:.1f} ms{note}",
            file=sys.stderr,
            flush=True,
        )
    return (
        f"| {scenario.name} | {broker} | {units:,} | {cells['callgrind']} | {cells['strace']} | "
        f"{cells['top']} |"
    )


if __name__ == "__main__":
    sys.exit(main())
