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
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from time import monotonic_ns

from xmq.bench import survivability_faults as faults
from xmq.bench.accounting import SeqTracker
from xmq.bench.connection import BenchConnection, CounterSink, wait_closed_or_abort
from xmq.bench.migration import ReceiverTally, pid_listening_on, tally_receiver
from xmq.bench.node_sampler import NodeSampler
from xmq.bench.packets import MQTT_V5, PublishTemplate, encode_connect, encode_subscribe
from xmq.bench.publish_schedule import PublishSchedule
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


class Client:
    """One persistent-session client that reconnects on its own (publisher or subscriber)."""

    def __init__(
        self, run: Run, index: int, node: int, *, publisher: bool, options: SurvivabilityOptions
    ) -> None:
        self.run = run
        self.index = index
        self.node = node
        self.publisher = publisher
        self.options = options
        role = "p" if publisher else "s"
        self.client_id = f"xb{options.run_id}-sv-{role}{index}"
        self.topic = f"bench/{options.run_id}/surv/{index}"
        self.trackers: dict[int, SeqTracker] = {}
        self.qos = options.qos_of(index)
        self.template = PublishTemplate(self.topic, qos=self.qos, protocol=options.protocol)
        self.qos2_in: set[int] = set()
        """A QoS 2 subscriber's ids received, not released (its session's, kept over
        reconnects)."""
        self.qos2_out: dict[int, bytes | None] = {}
        """A QoS 2 publisher's unfinished exchanges when its connection broke."""
        self.next_packet_id = 0
        self.connection: BenchConnection | None = None
        self.seq = 0
        self.pending = 0
        """Messages due while offline (or unacknowledged when the connection broke)."""
        self.watch: asyncio.Task[None] | None = None

    async def open(self, node: int) -> BenchConnection:
        options = self.options
        packet = encode_connect(
            self.client_id,
            protocol=options.protocol,
            clean_start=False,
            session_expiry=options.session_expiry,
        )
        connection = BenchConnection(
            self.run.sink,
            packet,
            protocol=options.protocol,
            trackers=self.trackers,
            template=self.template if self.publisher else None,
            publisher_id=self.index if self.publisher else -1,
            qos2_in=self.qos2_in,
        )
        host, port = options.nodes[node]
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(10):
                await loop.create_connection(lambda: connection, host, port)
                connack = await connection.connack
        except BaseException:
            connection.disconnect()
            raise
        if connack.reason_code != 0:
            connection.disconnect()
            raise ConnectionRefusedError(f"CONNACK 0x{connack.reason_code:02x} from {host}:{port}")
        if not connection.session_present:
            self.qos2_in.clear()  # a new session: no packet id state
        if not self.publisher and not connection.session_present:
            async with asyncio.timeout(10):
                codes = await connection.subscribe(
                    encode_subscribe(1, [self.topic], qos=self.qos, protocol=options.protocol)
                )
            if any(code >= 0x80 for code in codes):
                connection.disconnect()
                raise RuntimeError(f"SUBSCRIBE refused: {codes}")
        self.node = node
        connection.seq = self.seq
        self.connection = connection
        if self.qos2_out:  # a QoS 2 publisher's exchanges go on (a lost session: sent anew)
            unfinished, self.qos2_out = self.qos2_out, {}
            connection.resume_qos2(unfinished, self.next_packet_id)
        if self.pending:
            count, self.pending = self.pending, 0
            connection.publish(count, monotonic_ns())
        return connection

    def publish(self, count: int, now_ns: int) -> None:
        connection = self.connection
        transport = connection.transport if connection is not None else None
        if connection is None or transport is None or transport.is_closing():
            self.pending += count
            return
        connection.publish(count, now_ns)

    @property
    def sent(self) -> int:
        return self.connection.seq if self.connection is not None else self.seq

    async def keep_alive(self) -> None:
        """Wait for the connection to break, then reconnect with backoff (until cancelled)."""
        options = self.options
        while True:
            connection = self.connection
            if connection is None:
                return
            await asyncio.shield(connection.closed)
            if connection.closing:
                return
            lost_at = time.monotonic()
            if self.qos == 2:
                # its unfinished exchanges go on after the reconnect (same packet ids)
                self.seq = connection.seq
                self.pending += connection.backlog
                self.qos2_out = connection.qos2_out
                self.next_packet_id = connection.next_packet_id
            else:
                # what the broker did not acknowledge is sent again, same sequence numbers
                self.seq = connection.seq - connection.inflight
                self.pending += connection.inflight + connection.backlog
            self.connection = None
            delay = options.backoff_initial_s
            node = self.node
            attempts = 0
            reopened: BenchConnection | None = None
            while reopened is None:
                if options.reconnect == "random":
                    node = random.choice([n for n in range(len(options.nodes)) if n != node])
                else:
                    node = (node + 1) % len(options.nodes)
                attempts += 1
                try:
                    reopened = await self.open(node)
                except (OSError, TimeoutError, ConnectionError, RuntimeError) as exc:
                    self.run.note_refusal(f"{type(exc).__name__}: {exc}")
                    if time.monotonic() - lost_at > options.reconnect_timeout_s:
                        self.run.result.gave_up += 1
                        return
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, options.backoff_max_s)
            self.run.result.reconnects.append(time.monotonic() - lost_at)
            self.run.result.reconnect_attempts.append(attempts)
            if reopened.session_present:
                self.run.result.sessions_resumed += 1
            else:
                self.run.result.sessions_lost += 1

    def close(self) -> None:
        if self.watch is not None:
            self.watch.cancel()
        if self.connection is not None:
            self.seq = self.connection.seq
            self.connection.disconnect(expire_session=True)


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
