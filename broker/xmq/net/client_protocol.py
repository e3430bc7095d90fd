"""The asyncio protocol of one MQTT client connection: bytes in, packets to the core, bytes out.

``data_received`` decodes every complete packet and hands each to the core synchronously.
Output is appended to one ``bytearray`` per connection and written once per loop tick for all
connections that have output (``FlushScheduler``), so a burst of deliveries to one client costs
one ``write`` system call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import cast

from xmq.codec.errors import ProtocolError
from xmq.codec.plain_publish import plain_publish
from xmq.codec.puback_batch import plain_puback_ids
from xmq.codec.reader import PacketReader
from xmq.core.auth_ports import Authenticator, Authorizer
from xmq.core.broker import Broker
from xmq.core.connection import ClientConnection
from xmq.core.connection_states import CONNECTED
from xmq.core.publish_flow import route_publish

log = logging.getLogger("xmq.net")

LINGER_S = 2.0
"""How long a closed connection waits for the client to close its side."""


class FlushScheduler:
    """Writes every connection's pending output once per event-loop tick."""

    __slots__ = ("_armed", "_dirty", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._dirty: list[MqttClientProtocol] = []
        self._armed = False

    def mark(self, link: MqttClientProtocol) -> None:
        self._dirty.append(link)
        if not self._armed:
            self._armed = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._armed = False
        dirty = self._dirty
        self._dirty = []
        for link in dirty:
            link.flush()


class MqttClientProtocol(asyncio.Protocol):
    """One client connection (implements the core's ``ClientLink`` port)."""

    __slots__ = (
        "_clock",
        "_closing",
        "_linger",
        "_out",
        "_paused_writing",
        "_scheduler",
        "_stats",
        "_transport",
        "_write_limit",
        "congested",
        "conn",
        "on_close",
        "on_deadline",
        "on_made",
        "peer",
        "reader",
        "wheel_slot",
    )

    def __init__(
        self,
        broker: Broker,
        authenticator: Authenticator,
        authorizer: Authorizer,
        scheduler: FlushScheduler,
        max_packet_size: int,
        on_close: Callable[[MqttClientProtocol], None] | None = None,
    ) -> None:
        self._transport: asyncio.Transport | None = None
        self._scheduler = scheduler
        self._out = bytearray()
        self._closing = False
        self._linger: asyncio.TimerHandle | None = None
        self._paused_writing = False
        self.congested = False
        self._write_limit = broker.settings.max_write_buffer_bytes
        self._clock = broker.loop.time
        self._stats = broker.stats
        self.reader = PacketReader(max_packet_size)
        self.peer = "-"
        self.on_close = on_close
        self.on_made: Callable[[MqttClientProtocol, asyncio.Transport], None] | None = None
        """Called once the transport is up (PROXY peer, client certificate user name)."""
        self.on_deadline: Callable[[MqttClientProtocol], None] | None = None
        """Called when its deadline in the broker's wheel comes (the connect timeout)."""
        self.wheel_slot = 0
        self.conn = ClientConnection(broker, self, authenticator, authorizer)

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self._transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"{peer[0]}:{peer[1]}"
        # No TCP_NODELAY here: asyncio and uvloop set it on every TCP transport they create
        # (accepted, PROXY hand-off, under TLS); one more setsockopt per connect was waste.
        self.conn.last_seen = self._clock()
        if self.on_made is not None:
            self.on_made(self, transport)

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        conn.last_seen = self._clock()
        self._stats.bytes_received += len(data)
        if conn.state == CONNECTED and not self.reader.pending:
            first = data[0]
            if first == 0x40:
                acked = plain_puback_ids(data)  # the common read of a fan-out subscriber
                if acked is not None:
                    conn.on_pubacks(acked)
                    return
            elif first & 0xF0 == 0x30:
                # one plain PUBLISH: the common read of a device
                plain = plain_publish(data, conn.version, self.reader.max_packet_size)
                if plain is not None:
                    topic, qos, packet_id, payload, head, tail = plain
                    wire = (head, tail)
                    route_publish(conn, topic, qos, False, payload, None, packet_id, wire)
                    return
        try:
            packets = self.reader.feed(data)
        except ProtocolError as error:
            for packet in error.decoded:  # complete packets that came before the bad one
                if self._closing:
                    break
                conn.handle(packet)
            conn.protocol_error(error)
            self._closing = True
            return
        for packet in packets:
            if self._closing:
                return
            conn.handle(packet)
        pending = self.reader.pending
        if pending and conn.state != CONNECTED and not conn.accepts_pending(len(pending)):
            conn.refuse_pending()
            self._closing = True

    def wheel_due(self, now: float) -> float | None:
        """The broker's deadline wheel: this connection's connect timeout is due."""
        if self.on_deadline is not None:
            self.on_deadline(self)
        return None

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        self._out = bytearray()
        self.conn.connection_lost()
        if self.on_close is not None:
            self.on_close(self)

    def pause_writing(self) -> None:
        self._paused_writing = True
        self.congested = True

    def resume_writing(self) -> None:
        self._paused_writing = False
        self.congested = False
        session = self.conn.session
        if session is not None and session.connection is self.conn:
            session.pump(self._clock())

    # -- ClientLink -------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._closing:
            return
        out = self._out
        if not out:
            self._scheduler.mark(self)
        out += data

    def write_publish(self, head: bytes, packet_id: int, tail: bytes) -> None:
        if self._closing:
            return
        out = self._out
        if not out:
            self._scheduler.mark(self)
        out += head
        if packet_id:
            out += packet_id.to_bytes(2, "big")
        out += tail

    def writable(self) -> bool:
        return not self._paused_writing and len(self._out) < self._write_limit

    def flush(self) -> None:
        out = self._out
        transport = self._transport
        if out and transport is not None and not transport.is_closing():
            self._out = bytearray()
            self._stats.bytes_sent += len(out)
            transport.write(out)

    def close(self) -> None:
        if self._closing:
            return
        self.flush()
        self._closing = True
        transport = self._transport
        if transport is None:
            return
        if transport.can_write_eof() and not transport.is_closing():
            # Half-close and let the client close: closing at once with its bytes unread
            # (PUBACKs in flight) makes the kernel send RST, and a RST can destroy our last
            # packets (the DISCONNECT or CONNACK, queued PUBLISHes) before the client reads them.
            transport.write_eof()
            transport.resume_reading()
            self._linger = self.conn.broker.loop.call_later(LINGER_S, transport.close)
        else:
            transport.close()

    def abort(self) -> None:
        self._closing = True
        self._out = bytearray()
        if self._transport is not None:
            self._transport.abort()

    def pause_reading(self) -> None:
        if self._transport is not None and not self._closing:
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._transport is not None and not self._closing:
            self._transport.resume_reading()
