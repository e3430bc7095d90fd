"""A survivability client: one persistent session (publisher or subscriber) that reconnects.

When its connection breaks it goes to the next node (or a random other one) with exponential
backoff and resumes its session; a publisher keeps what fell due while it was offline and sends
it, after the messages left unacknowledged, with the same sequence numbers.
"""

from __future__ import annotations

import asyncio
import random
import time
from time import monotonic_ns
from typing import TYPE_CHECKING

from xmq.bench.accounting import SeqTracker
from xmq.bench.connection import BenchConnection
from xmq.bench.packets import PublishTemplate, encode_connect, encode_subscribe

if TYPE_CHECKING:
    from xmq.bench.survivability import Run, SurvivabilityOptions


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
