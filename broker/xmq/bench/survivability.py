"""Survivability: steady point-to-point load across cluster nodes while a fault strikes.

The fault (``--fault``, :mod:`xmq.bench.survivability_faults`) is by default a kill: described
here; the others (drain, stop, redis-stop, redis-restart, link-reset, takeover) strike at the
same moment and are counted the same way.

N publisher/subscriber pairs with persistent sessions (Clean Start 0, Session Expiry) are spread
over the nodes (subscriber n on node n mod N, publisher n on node (n+1) mod N, so every pair
crosses nodes). Publishing follows a schedule at a steady total rate. At ``kill_at_s`` the victim
node's process is killed with SIGKILL; ``restart_after_s`` later the given command starts it
again. Every client that loses its connection reconnects on its own, to the next node, with
exponential backoff, and resumes its session (a subscriber whose session did not come back
subscribes again). A publisher keeps what fell due while it was offline and, after
reconnecting, sends it together with the messages that were not acknowledged when the
connection broke (same sequence numbers: the subscriber counts any second copy as a duplicate).
That client is :mod:`xmq.bench.survivability_client`.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from time import monotonic_ns

from xmq.bench import survivability_faults as faults
from xmq.bench.connection import CounterSink, wait_closed_or_abort
from xmq.bench.migration import ReceiverTally, pid_listening_on, tally_receiver
from xmq.bench.node_sampler import NodeSampler
from xmq.bench.packets import MQTT_V5
from xmq.bench.publish_schedule import PublishSchedule
from xmq.bench.survivability_client import Client
from xmq.bench.survivability_faults import FaultOptions
from xmq.bench.survivability_result import IntervalRecord, SurvivabilityResult

RESTARTED: list[subprocess.Popen[bytes]] = []
"""The nodes this process started again: left running (they are the user's), kept here so that
the handle outlives the run (a caller may stop them)."""


@dataclass(frozen=True, slots=True)
class SurvivabilityOptions:
    nodes: tuple[tuple[str, int], ...]
    kill_node: int = -1
    """Index into ``nodes`` of the node to kill (default: the last)."""
    victim_pid: int | None = None
    """PID of the victim; by default the process listening on its port."""
    restart_cmd: tuple[str, ...] = ()
    """Command line that starts the victim again; empty: no restart."""
    pairs: int = 20
    rate: float = 200.0
    """Total messages per second over all publishers."""
    duration_s: float = 20.0
    kill_at_s: float = 5.0
    restart_after_s: float = 5.0
    interval_s: float = 1.0
    protocol: int = MQTT_V5
    session_expiry: int = 3600
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 2.0
    reconnect_timeout_s: float = 60.0
    drain_s: float = 20.0
    broker_pids: tuple[int, ...] = ()
    """Broker processes to sample (default: the processes listening on the nodes' ports)."""
    redis_url: str | None = None
    """Sample this Redis's CPU and command rate too."""
    run_id: str = field(default_factory=lambda: f"{os.getpid():x}")
    fault: FaultOptions = field(default_factory=FaultOptions)
    """What happens at ``kill_at_s`` (default: SIGKILL of the victim node)."""
    qos2_pairs: int = 0
    """How many of the pairs (the last ones) publish and subscribe at QoS 2."""
    reconnect: str = "next"
    """Where a client whose connection broke goes: the ``next`` node in order, or a
    ``random`` other one (as behind a load balancer)."""

    def qos_of(self, pair: int) -> int:
        return 2 if pair >= self.pairs - self.qos2_pairs else 1

    @property
    def victim_index(self) -> int:
        return self.kill_node % len(self.nodes)

    @property
    def messages_per_publisher(self) -> int:
        return math.ceil(self.rate / self.pairs * self.duration_s)


class Run:
    def __init__(self, options: SurvivabilityOptions) -> None:
        self.options = options
        self.sink = CounterSink()
        self.result = SurvivabilityResult()
        self.nodes: NodeSampler | None = None
        count = len(options.nodes)
        self.subscribers = [
            Client(self, i, i % count, publisher=False, options=options)
            for i in range(options.pairs)
        ]
        self.publishers = [
            Client(self, i, (i + 1) % count, publisher=True, options=options)
            for i in range(options.pairs)
        ]

    def note_refusal(self, text: str) -> None:
        if len(self.result.refusals) < 5:
            self.result.refusals.append(text)

    def sample(self, t0: float) -> None:
        counters = self.sink.swap()
        usage = self.nodes.sample() if self.nodes is not None else None
        self.result.intervals.append(
            IntervalRecord(
                t_s=round(time.monotonic() - t0, 3),
                sent=counters.sent,
                delivered=counters.delivered,
                duplicates=counters.duplicates,
                connected=self.sink.live,
                connection_losses=counters.connection_losses,
                latency_avg_ms=(
                    counters.lat_sum_us / counters.delivered / 1000 if counters.delivered else 0.0
                ),
                latency_max_ms=counters.lat_max_us / 1000,
                broker_cpu_pct=usage.broker_cpu_pct if usage else 0.0,
                broker_rss_mb=usage.broker_rss_bytes / 1e6 if usage else 0.0,
                redis_cpu_pct=usage.redis_cpu_pct if usage else None,
                redis_ops=usage.redis_ops if usage else None,
            )
        )

    def complete(self, schedule: PublishSchedule) -> bool:
        if schedule.next_index < schedule.total:
            return False
        for publisher, subscriber in zip(self.publishers, self.subscribers, strict=True):
            connection = publisher.connection
            if connection is None or connection.inflight or publisher.pending:
                return False
            tracker = subscriber.trackers.get(publisher.index)
            if tracker is None or tracker.unique < publisher.sent:
                return False
        return True


async def _inject(run: Run, t0: float) -> None:
    """At ``kill_at_s``: the fault of ``options.fault`` (see ``survivability_faults``)."""
    options = run.options
    result = run.result
    fault = options.fault
    result.fault = fault.kind
    await asyncio.sleep(max(0.0, t0 + options.kill_at_s - time.monotonic()))
    if fault.kind in ("redis-stop", "redis-restart"):
        pid = faults.redis_pid(options.redis_url)
        result.victim, result.victim_pid = options.redis_url or "", pid
        result.killed_at_s = time.monotonic() - t0
        if fault.kind == "redis-stop":
            await asyncio.to_thread(faults.pause, pid, fault.duration_s)
            result.fault_note = f"Redis pid {pid} stopped {fault.duration_s:.1f} s"
        else:
            new = await asyncio.to_thread(faults.restart_redis, pid, options.redis_url or "")
            result.fault_note = f"Redis pid {pid} killed, restarted as pid {new}"
        return
    if fault.kind == "partition":
        result.killed_at_s = time.monotonic() - t0
        await asyncio.to_thread(faults.partition, fault.cut_cmd, fault.heal_cmd, fault.duration_s)
        result.fault_note = f"partition for {fault.duration_s:.1f} s: {' '.join(fault.cut_cmd)}"
        return
    if fault.kind == "takeover":
        result.killed_at_s = time.monotonic() - t0
        chosen = run.subscribers[:: max(1, 10)]
        outcomes = await asyncio.gather(*(faults.takeover(run, c) for c in chosen))
        result.takeover_both_live = sum(outcomes)
        result.fault_note = (
            f"{len(chosen)} client ids connected to two nodes at once; "
            f"{result.takeover_both_live} left with two live connections"
        )
        return
    host, port = options.nodes[options.victim_index]
    victim = options.victim_pid or pid_listening_on(port)
    if victim is None:
        raise RuntimeError(f"no process listens on the victim node {host}:{port}")
    result.victim = f"{host}:{port}"
    result.victim_pid = victim
    result.killed_at_s = time.monotonic() - t0
    if fault.kind == "stop":
        await asyncio.to_thread(faults.pause, victim, fault.duration_s)
        result.fault_note = f"node stopped (SIGSTOP) {fault.duration_s:.1f} s"
        return
    if fault.kind == "drain":
        answers = [await asyncio.to_thread(faults.drain, fault.victim_http)]
        for http in fault.also_drain:
            await asyncio.sleep(fault.duration_s)
            answers.append(await asyncio.to_thread(faults.drain, http))
        result.fault_note = "drain: " + "; then ".join(answers)
        return
    if fault.kind == "link-reset":
        reset = faults.reset_links(victim, tuple(result.broker_pids))
        result.fault_note = f"{reset} link connections reset (ss -K)"
        return
    os.kill(victim, signal.SIGKILL)
    result.fault_note = "node killed (SIGKILL)"
    if not options.restart_cmd:
        return
    await asyncio.sleep(options.restart_after_s)
    process = await asyncio.to_thread(
        subprocess.Popen,
        options.restart_cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    RESTARTED.append(process)
    result.restarted_pid = process.pid
    if run.nodes is not None:
        run.nodes.add(process.pid)
        result.broker_pids.append(process.pid)
    result.restarted_at_s = time.monotonic() - t0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        writer.close()
        result.listening_again_at_s = time.monotonic() - t0
        return


async def _sampler(run: Run, t0: float) -> None:
    interval = run.options.interval_s
    tick = 1
    while True:
        await asyncio.sleep(max(0.0, t0 + tick * interval - time.monotonic()))
        run.sample(t0)
        tick += 1


async def run_survivability(options: SurvivabilityOptions) -> SurvivabilityResult:
    if len(options.nodes) < 2:
        raise ValueError("survivability needs at least two nodes")
    run = Run(options)
    result = run.result
    pids = options.broker_pids or tuple(
        pid for _, port in options.nodes if (pid := pid_listening_on(port)) is not None
    )
    run.nodes = NodeSampler(pids, options.redis_url)
    result.broker_pids = list(run.nodes.pids)
    started = time.monotonic()
    for client in (*run.subscribers, *run.publishers):
        await client.open(client.node)
    for client in (*run.subscribers, *run.publishers):
        client.watch = asyncio.create_task(client.keep_alive())
    run.sink.swap()
    t0 = time.monotonic()
    schedule = PublishSchedule(
        run.publishers, options.rate / options.pairs, options.messages_per_publisher, monotonic_ns()
    )
    schedule.start()
    sampler = asyncio.create_task(_sampler(run, t0))
    killer = asyncio.create_task(_inject(run, t0))
    deadline = t0 + max(options.duration_s, options.kill_at_s) + options.drain_s
    try:
        while time.monotonic() < deadline:
            if run.complete(schedule) and killer.done():
                await asyncio.sleep(0.5)  # let late duplicates show
                break
            await asyncio.sleep(0.1)
        if killer.done():
            killer.result()  # re-raise a failure of the kill
        else:
            killer.cancel()
    finally:
        schedule.stop()
        sampler.cancel()
        run.sample(t0)
        for publisher in run.publishers:
            connection = publisher.connection
            result.unacknowledged += publisher.pending + (
                connection.inflight + connection.backlog if connection is not None else 0
            )
        for client in (*run.publishers, *run.subscribers):
            client.close()
        await wait_closed_or_abort(
            [c.connection for c in (*run.publishers, *run.subscribers) if c.connection is not None]
        )
        run.nodes.close()
    for publisher, subscriber in zip(run.publishers, run.subscribers, strict=True):
        tally: ReceiverTally = tally_receiver(
            subscriber.trackers.get(publisher.index), publisher.sent
        )
        result.sent += publisher.sent
        result.received += tally.received
        result.missing += tally.missing
        result.duplicates += tally.duplicates
        if publisher.qos == 2:
            result.qos2_duplicates += tally.duplicates
        if tally.missing or tally.duplicates:
            result.pairs_hit[publisher.index] = (tally.missing, tally.duplicates)
    result.ack_errors = dict(run.sink.ack_errors)
    result.pairs = options.pairs
    result.qos2_pairs = options.qos2_pairs
    result.offered_rate = options.rate
    result.elapsed_s = time.monotonic() - started
    return result
