"""The seed's stateful session migration check, scaled by flags.

A persistent subscriber (Clean Start 0, Session Expiry) connects to node C, a clean subscriber to
node B, a publisher to node A. Node C is killed with SIGKILL; the publisher sends N QoS 1
messages at R/s; some seconds after the kill the persistent subscriber reconnects to node D with
the same client id (retrying while the cluster still refuses it). At the end: did the session
come back (Session Present), how long the reconnect took, and for both subscribers how many of
the N messages are missing or duplicated.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass, field
from time import monotonic_ns

import psutil

from xmq.bench.accounting import SeqTracker
from xmq.bench.connection import BenchConnection, CounterSink, wait_closed_or_abort
from xmq.bench.packets import MQTT_V5, PublishTemplate, encode_connect, encode_subscribe
from xmq.bench.publish_schedule import PublishSchedule


@dataclass(frozen=True, slots=True)
class MigrationOptions:
    nodes: tuple[tuple[str, int], ...]
    """A (publisher), B (live clean subscriber), C (session owner, killed), D (reconnect)."""
    victim_pid: int | None = None
    """PID of node C; by default the process listening on C's port."""
    messages: int = 2000
    rate: float = 100.0
    protocol: int = MQTT_V5
    session_expiry: int = 3600
    reconnect_after_s: float = 3.0
    reconnect_timeout_s: float = 60.0
    drain_s: float = 20.0
    run_id: str = field(default_factory=lambda: f"{os.getpid():x}")

    def node(self, role: str) -> tuple[str, int]:
        index = "ABCD".index(role)
        if index == 3 and len(self.nodes) < 4:
            return self.nodes[1]  # three nodes: reconnect where the live subscriber is
        return self.nodes[index]


@dataclass(slots=True)
class ReceiverTally:
    received: int = 0
    missing: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    first_missing: list[int] = field(default_factory=list)
    """Up to 20 missing sequence numbers, for diagnosis."""


@dataclass(slots=True)
class MigrationResult:
    sent: int = 0
    victim_pid: int = 0
    persistent: ReceiverTally = field(default_factory=ReceiverTally)
    live: ReceiverTally = field(default_factory=ReceiverTally)
    session_present: bool = False
    resubscribed: bool = False
    reconnect_attempts: int = 0
    reconnect_s: float = 0.0
    """From the first reconnect attempt to the accepting CONNACK."""
    outage_s: float = 0.0
    """From the kill to the accepting CONNACK."""
    refusals: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def passed(self) -> bool:
        return (
            self.session_present
            and self.persistent.missing == 0
            and self.persistent.duplicates == 0
            and self.live.missing == 0
        )


def pid_listening_on(port: int) -> int | None:
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            return conn.pid
    return None


def tally_receiver(tracker: SeqTracker | None, sent: int) -> ReceiverTally:
    if tracker is None:
        return ReceiverTally(missing=sent)
    seen = int.from_bytes(tracker.bits, "little")
    within = (seen & ((1 << sent) - 1)).bit_count() if sent else 0
    missing = [seq for seq in range(sent) if not seen >> seq & 1][:20]
    return ReceiverTally(within, sent - within, tracker.duplicates, tracker.out_of_order, missing)


async def _connect(
    sink: CounterSink,
    node: tuple[str, int],
    client_id: str,
    options: MigrationOptions,
    *,
    persistent: bool,
    trackers: dict[int, SeqTracker] | None = None,
    template: PublishTemplate | None = None,
) -> BenchConnection:
    packet = encode_connect(
        client_id,
        protocol=options.protocol,
        clean_start=not persistent,
        session_expiry=options.session_expiry if persistent else 0,
    )
    connection = BenchConnection(
        sink,
        packet,
        protocol=options.protocol,
        trackers=trackers,
        template=template,
        publisher_id=0 if template else -1,
    )
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(10):
        await loop.create_connection(lambda: connection, node[0], node[1])
        connack = await connection.connack
    if connack.reason_code != 0:
        connection.disconnect()
        raise ConnectionRefusedError(f"CONNACK 0x{connack.reason_code:02x} from {node}")
    return connection


async def _subscribe(connection: BenchConnection, topic: str, options: MigrationOptions) -> None:
    async with asyncio.timeout(10):
        codes = await connection.subscribe(
            encode_subscribe(1, [topic], qos=1, protocol=options.protocol)
        )
    if any(code >= 0x80 for code in codes):
        raise RuntimeError(f"SUBSCRIBE refused: {codes}")


async def run_migration(options: MigrationOptions) -> MigrationResult:
    if len(options.nodes) < 3:
        raise ValueError("migration needs at least three nodes (A, B, C[, D])")
    result = MigrationResult()
    started = time.monotonic()
    sink = CounterSink()
    topic = f"bench/{options.run_id}/migration"
    live_trackers: dict[int, SeqTracker] = {}
    kept_trackers: dict[int, SeqTracker] = {}
    session_id = f"xb{options.run_id}-mig-persistent"
    live = await _connect(
        sink, options.node("B"), f"xb{options.run_id}-mig-live", options,
        persistent=False, trackers=live_trackers,
    )  # fmt: skip
    await _subscribe(live, topic, options)
    kept = await _connect(
        sink, options.node("C"), session_id, options, persistent=True, trackers=kept_trackers
    )
    await _subscribe(kept, topic, options)
    publisher = await _connect(
        sink, options.node("A"), f"xb{options.run_id}-mig-pub", options,
        persistent=False, template=PublishTemplate(topic, qos=1, protocol=options.protocol),
    )  # fmt: skip
    victim = options.victim_pid or pid_listening_on(options.node("C")[1])
    if victim is None:
        raise RuntimeError(f"no process listens on node C {options.node('C')}")
    result.victim_pid = victim
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    async with asyncio.timeout(10):
        await kept.closed
    schedule = PublishSchedule([publisher], options.rate, options.messages, monotonic_ns())
    schedule.start()
    await asyncio.sleep(options.reconnect_after_s)
    kept = await _reconnect(sink, session_id, kept_trackers, options, result)
    result.outage_s = time.monotonic() - killed_at
    if not result.session_present:
        result.resubscribed = True
        await _subscribe(kept, topic, options)
    deadline = time.monotonic() + options.messages / options.rate + options.drain_s
    while time.monotonic() < deadline:
        done = schedule.next_index >= options.messages and publisher.inflight == 0
        got_all = all(
            (t := trackers.get(0)) is not None and t.unique >= options.messages
            for trackers in (live_trackers, kept_trackers)
        )
        if done and got_all:
            await asyncio.sleep(0.5)  # let late duplicates show
            break
        await asyncio.sleep(0.1)
    schedule.stop()
    result.sent = publisher.seq
    result.live = tally_receiver(live_trackers.get(0), result.sent)
    result.persistent = tally_receiver(kept_trackers.get(0), result.sent)
    for connection in (live, publisher):
        connection.disconnect()
    kept.disconnect(expire_session=True)
    await wait_closed_or_abort([live, publisher, kept])
    result.elapsed_s = time.monotonic() - started
    return result


async def _reconnect(
    sink: CounterSink,
    session_id: str,
    trackers: dict[int, SeqTracker],
    options: MigrationOptions,
    result: MigrationResult,
) -> BenchConnection:
    first = time.monotonic()
    while True:
        result.reconnect_attempts += 1
        try:
            connection = await _connect(
                sink, options.node("D"), session_id, options, persistent=True, trackers=trackers
            )
        except (OSError, TimeoutError, ConnectionError) as exc:
            if len(result.refusals) < 5:
                result.refusals.append(f"{type(exc).__name__}: {exc}")
            if time.monotonic() - first > options.reconnect_timeout_s:
                raise
            await asyncio.sleep(0.2)
            continue
        result.reconnect_s = time.monotonic() - first
        result.session_present = connection.session_present
        return connection


def render_migration(result: MigrationResult) -> str:
    lines = [
        "migration: persistent subscriber's node killed (SIGKILL), reconnect elsewhere",
        f"  messages sent            {result.sent:,}",
        f"  node killed              pid {result.victim_pid}",
        f"  reconnect                {result.reconnect_s * 1000:.0f} ms after "
        f"{result.reconnect_attempts} attempt(s); outage {result.outage_s:.1f} s",
        f"  session present          {'yes' if result.session_present else 'NO (resubscribed)'}",
        f"  persistent subscriber    received {result.persistent.received:,}, missing "
        f"{result.persistent.missing:,}, duplicates {result.persistent.duplicates:,}"
        + (
            f" (first missing: {result.persistent.first_missing})"
            if result.persistent.missing
            else ""
        ),
        f"  live clean subscriber    received {result.live.received:,}, missing "
        f"{result.live.missing:,}, duplicates {result.live.duplicates:,}",
        f"  verdict                  {'PASS' if result.passed else 'FAIL'}",
    ]
    lines += [f"  refused: {text}" for text in result.refusals]
    return "\n".join(lines)
