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
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

from xmq.bench.mosquitto import MosquittoProcess, free_port
from xmq.bench.plan import Target
from xmq.bench.runner import run_plan
from xmq.bench.scenarios import (
    CommonOptions,
    ScenarioPlan,
    connections,
    fanout,
    p2p,
    persistence,
)
from xmq.bench.tracers import (
    Callgrind,
    Strace,
    SyscallCounts,
    TracerError,
    _wait_for_new,
    parse_callgrind_total,
    per_unit,
)
from xmq.native_build import BUILD  # the brokers started here import the same tree, same env

_LISTENING = re.compile(r"^xmq: listening mqtt \S+ (\S+):(\d+)$")


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


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    units: int
    """N: deliveries (or clients) of the larger run."""
    rate: float
    """Deliveries (clients) per second offered in the larger run (half that in the other)."""
    build: Callable[[Target, CommonOptions, int, float], ScenarioPlan]
    nodes: int = 1
    redis: bool = False
    max_queued_writes: int = 0
    mosquitto: bool = True
    settle_s: float = 0.0
    """Wait after set-up before the window opens (subscriptions spreading between nodes)."""
    tail_s: float = 10.0
    """The window closes this long after the publishing ends (the last delivery arrived well
    before: else the run is flagged ``overran``), in both runs: their windows are the same
    length, so what a broker does per second whatever it carries cancels exactly."""


def _fanout(target: Target, options: CommonOptions, units: int, rate: float) -> ScenarioPlan:
    return fanout(target, options, publishers=5, topics=5, subscribers=100, rate=rate)


def _p2p(target: Target, options: CommonOptions, units: int, rate: float) -> ScenarioPlan:
    return p2p(target, options, pairs=100, rate=rate)


def _durable(target: Target, options: CommonOptions, units: int, rate: float) -> ScenarioPlan:
    return persistence(target, options, pairs=100, rate=rate, session_expiry=3600)


def _connect(target: Target, options: CommonOptions, units: int, rate: float) -> ScenarioPlan:
    return connections(target, options, clients=units, rate=rate, hold_s=1.0)


# Rates low enough that the broker, ~50x slower under callgrind and sharing a busy machine,
# is idle most of the time: each message (each publish's fan-out) is handled alone in its loop
# turn whatever else runs, so the counts do not depend on the machine's load.
SCENARIOS = {
    "fanout": Scenario("fanout", 6000, 200.0, _fanout),
    "p2p": Scenario("p2p", 1000, 50.0, _p2p),
    # A cluster node renews its lease and checks its links every few seconds: more messages
    # (and a longer run) so that the difference of two runs is not lost in that; at 25/s, as
    # at 50/s the two nodes under callgrind fell behind (p99 0.1-2.8 s) on a shared machine.
    "cross-node": Scenario(
        "cross-node", 2000, 25.0, _p2p, nodes=2, redis=True, mosquitto=False, settle_s=5.0
    ),
    "durable": Scenario("durable", 2000, 50.0, _durable, redis=True, mosquitto=False),
    "connect": Scenario("connect", 300, 15.0, _connect),
}
_START_LEAD_S = 0.5
"""The runner starts the publishers this long after the window opens (``xmq.bench.runner``)."""
_BEHIND_US = 50_000.0
"""A run whose end-to-end p99 is above this was late somewhere (the broker under callgrind, or
the load client on a busy machine): messages may have shared loop turns. Flagged."""


@contextlib.contextmanager
def redis_server(work: Path) -> Iterator[str]:
    """A private redis-server (append-only, fsync every second, as in scripts/bench-cluster)."""
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        + ["--appendonly", "yes", "--appendfsync", "everysec", "--dir", str(work)],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        yield url
    finally:
        client.close()
        process.terminate()
        process.wait(10)


class XmqNodes:
    """``xmq serve`` processes (one, or a cluster around ``redis_url``) under a tracer's wrap."""

    def __init__(self, scenario: Scenario, tracer: Tracer, work: Path, redis_url: str) -> None:
        self.processes: list[subprocess.Popen[str]] = []
        self.ports: list[int] = []
        for index in range(scenario.nodes):
            config = work / f"node-{index}.yaml"
            config.write_text(_node_yaml(scenario, redis_url))
            env = dict(os.environ, PYTHONHASHSEED="0", XMQ_SYS__INTERVAL_S="0")
            env["XMQ_NODE_ID"] = f"node-{index}"
            argv = [sys.executable, "-m", "xmq", "serve", "--host", "127.0.0.1", "--port", "0"]
            log = (work / f"node-{index}.log").open("w")
            process = subprocess.Popen(
                tracer.wrap([*argv, "--config", str(config)]),
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                text=True,
            )
            log.close()
            self.processes.append(process)
            self.ports.append(_read_port(process, work / f"node-{index}.log"))
        if scenario.nodes > 1:
            _wait_leases(redis_url, scenario.nodes)

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _node_yaml(scenario: Scenario, redis_url: str) -> str:
    text = "metrics:\n  enabled: false\nlog:\n  level: WARNING\n"
    if not scenario.redis:
        return text
    return text + (
        f"cluster:\n  redis_url: {redis_url}\n  name: instr\n  lease_ttl_s: 10\n"
        "  link_host: 127.0.0.1\n  link_port: 0\n"
        f"persistence:\n  max_queued_writes: {scenario.max_queued_writes}\n"
    )


def _read_port(process: subprocess.Popen[str], log: Path) -> int:
    assert process.stdout is not None
    for line in process.stdout:
        match = _LISTENING.match(line.strip())
        if match:
            return int(match.group(2))
    raise RuntimeError(f"xmq serve did not start: {log.read_text(errors='replace')[-2000:]}")


def _wait_leases(redis_url: str, count: int) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        deadline = time.monotonic() + 120
        while len(list(client.scan_iter("xmq:v1:{instr}:node:lease:*"))) < count:
            if time.monotonic() > deadline:
                raise RuntimeError("the nodes did not join the cluster")
            time.sleep(0.1)
    finally:
        client.close()
    time.sleep(3.0)  # the links form after the leases


class Window:
    """The runner's measure window, switching the tracer on and off on every broker, open for
    ``length_s`` whatever the run's lateness: a cluster node renews its lease, beats its links
    and runs its timers every second (~1.3 M instructions a second for an idle node under
    callgrind), so two windows of different lengths (a run that drained a few seconds later)
    would put seconds of that into the difference of the runs — session 13's 26,778 and
    36,844 per cross-node message from two runs of one tree."""

    def __init__(
        self, tracer: Tracer, pids: Sequence[int], settle_s: float, length_s: float
    ) -> None:
        self.tracer = tracer
        self.pids = pids
        self.settle_s = settle_s
        self.length_s = length_s
        self.value: int | SyscallCounts | None = None
        self._opened_at = 0.0
        self.seconds = 0.0
        """How long the window was open (from instrumentation on to the dump's request)."""

    def opened(self) -> None:
        time.sleep(self.settle_s)
        self.tracer.open(self.pids)
        self._opened_at = time.monotonic()

    def closed(self) -> None:
        time.sleep(max(0.0, self._opened_at + self.length_s - time.monotonic()))
        self.seconds = time.monotonic() - self._opened_at
        self.value = self.tracer.close(self.pids)

    @property
    def overran(self) -> bool:
        """The run was still draining when the window was due to close (it closed later)."""
        return self.seconds > self.length_s + 1.0


@dataclass(slots=True)
class Run:
    scenario: str
    broker: str
    tracer: str
    units: int
    value: int | SyscallCounts
    loop_parts: LoopParts
    """Of ``value`` (callgrind), the instructions by event-loop phase (``NodesCallgrind``)."""
    missing: int
    seconds: float
    p99_us: float
    window_s: float
    overran: bool


def run_once(
    scenario: Scenario,
    broker: str,
    tracer: Tracer,
    units: int,
    duration: float,
    work: Path,
    redis_url: str,
) -> Run:
    """One run of ``units`` deliveries (clients) spread over ``duration`` seconds."""
    started = time.monotonic()
    rate = units / duration
    length_s = _START_LEAD_S + duration + scenario.tail_s
    options = CommonOptions(
        duration_s=duration, warmup_s=0.0, drain_s=60.0, interval_s=0.5, setup_connect_rate=500.0
    )
    if broker == "mosquitto":
        with MosquittoProcess(wrapper=tracer.wrap([])) as mosquitto:
            target = Target("127.0.0.1", mosquitto.port, "mosquitto")
            window = Window(tracer, [mosquitto.pid], scenario.settle_s, length_s)
            result = run_plan(
                scenario.build(target, options, units, rate),
                options,
                label="mosquitto",
                window=window,
            )
    else:
        nodes = XmqNodes(scenario, tracer, work, redis_url)
        try:
            targets = tuple(Target("127.0.0.1", port, "xmq") for port in nodes.ports)
            if len(targets) > 1:
                options = CommonOptions(
                    duration_s=options.duration_s,
                    warmup_s=0.0,
                    drain_s=options.drain_s,
                    interval_s=options.interval_s,
                    setup_connect_rate=options.setup_connect_rate,
                    nodes=targets,
                )
            window = Window(tracer, nodes.pids, scenario.settle_s, length_s)
            result = run_plan(
                scenario.build(targets[0], options, units, rate),
                options,
                label="xmq",
                window=window,
                setup_timeout_s=300.0,
            )
        finally:
            nodes.stop()
    assert window.value is not None, "the run ended before its window closed"
    counted = result.summary.delivered if result.account is None else result.account.received
    missing = 0 if result.account is None else result.account.lost
    return Run(
        scenario.name,
        broker,
        tracer.name,
        counted,
        window.value,
        tracer.loop_parts if isinstance(tracer, NodesCallgrind) else LoopParts(),
        missing,
        time.monotonic() - started,
        result.summary.lat_p99_us,
        window.seconds,
        window.overran,
    )


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
