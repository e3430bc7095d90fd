"""One traced run of an instructions scenario: its brokers (and Redis), its window, its result.

``run_once`` starts the broker (each XMQ node, or Mosquitto) under the tracer's wrap, drives
the ``xmq bench`` load through ``run_plan`` and reads the tracer over a window of fixed length.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

from bench.instruction_scenarios import Scenario
from bench.nodes_callgrind import LoopParts, NodesCallgrind, Tracer
from xmq.bench.mosquitto import MosquittoProcess, free_port
from xmq.bench.plan import Target
from xmq.bench.runner import run_plan
from xmq.bench.scenarios import CommonOptions
from xmq.bench.tracers import SyscallCounts

_LISTENING = re.compile(r"^xmq: listening mqtt \S+ (\S+):(\d+)$")

_START_LEAD_S = 0.5
"""The runner starts the publishers this long after the window opens (``xmq.bench.runner``)."""


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
