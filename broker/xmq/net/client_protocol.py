"""The asyncio protocol of one MQTT client connection: bytes in, packets to the core, bytes out.

``data_received`` decodes packets (``DECODE_BATCH`` at a time) and hands each to the core
synchronously, until the packets handled have planned ``READ_SLICE_DELIVERIES`` deliveries
(each packet counting as ``PACKET_WORK``): the rest of the read waits for the next loop turn
(``call_soon``) with reading paused, so one read of thousands of PUBLISH packets fanned out
to thousands of sessions cannot hold the loop for seconds. What the turn does not handle is
not decoded either: it stays as bytes in the reader (``PacketReader.more``), so a read of
256 KiB of tiny packets costs each turn the decoding of its own slice only (a malformed
packet further on is answered when it is reached, after the packets before it). A PUBLISH
whose own fan-out is routed over several turns (``core.fanout_slices``;
``ClientConnection.fanning_out``) holds the rest of the read the same way until its last
slice. Packets keep their order.
Output (what the core writes, kept per loop turn and written at the read's end or the turn's)
is the base class's, ``net.client_output.ClientOutput``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import cast

from xmq.codec.errors import ProtocolError
from xmq.codec.packets import Packet
from xmq.codec.plain_publish import PlainRead, read_plain
from xmq.codec.puback_batch import plain_puback_id, plain_puback_ids
from xmq.codec.reader import PacketReader
from xmq.core.auth_ports import Authenticator, Authorizer
from xmq.core.broker import Broker
from xmq.core.connection import ClientConnection
from xmq.core.connection_states import CONNECTED
from xmq.core.login_input import accepts_pending, protocol_error, refuse_pending
from xmq.core.publish_flow import route_publish
from xmq.core.turn_flush import TurnFlush
from xmq.net.client_output import ClientOutput

log = logging.getLogger("xmq.net")

READ_SLICE_DELIVERIES = 4096
"""Deliveries routed from one connection's packets per loop turn (a few ms of work) before
the rest of its read waits for the next turn."""

PACKET_WORK = 8
"""Each packet handled counts as this many deliveries towards the slice: a read of packets
that reach no subscriber (retained messages on new topics, say) is sliced too, at 513."""

DECODE_BATCH = 64
"""Packets decoded at a time within a turn's slice: a turn that ends early (the packets fanned
out to the slice's deliveries) leaves at most this many decoded; the rest of the read stays
bytes until a later turn reaches it."""


_NO_PACKETS: list[Packet] = []
"""The packets a new read starts with (read, never changed)."""


FlushScheduler = TurnFlush
"""The clients' per-turn flush: ``core.turn_flush`` (shared with the node links)."""


class MqttClientProtocol(ClientOutput):
    """One client connection: an asyncio protocol (duck-typed: asyncio and uvloop call its
    methods by name) implementing the core's ``ClientLink`` (compiled base classes, so the
    core's writes are direct calls: ``ClientOutput``, the write half)."""

    __slots__ = (
        "_backlog",
        "_backlog_error",
        "_clock",
        "_fence",
        "_fenced",
        "_held",
        "_peer",
        "_plain",
        "conn",
        "on_close",
        "on_deadline",
        "on_made",
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
        super().__init__(broker, scheduler)
        self._backlog: list[Packet] | None = None  # a sliced read's decoded rest (or [])
        self._backlog_error: ProtocolError | None = None
        self._held = False  # the core paused reading (authentication, held acks)
        self._clock = broker.loop.time
        self._fence = broker.fence
        # bytes read while the lease was not proven (None: none since the last release; a
        # list made then, not one per connection: ~80 bytes each, where ``_plain``'s slot
        # costs 8)
        self._fenced: list[bytes] | None = None
        self.reader = PacketReader(max_packet_size)
        self._peer: str | None = None  # "ip:port", asked of the transport on first use (peer)
        self._plain: PlainRead | None = None  # its plain PUBLISH reads (made at the first)
        self.on_close = on_close
        self.on_made: Callable[[MqttClientProtocol, asyncio.Transport], None] | None = None
        """Called once the transport is up (PROXY peer, client certificate user name)."""
        self.on_deadline: Callable[[MqttClientProtocol], None] | None = None
        """Called when its deadline in the broker's wheel comes (the connect timeout)."""
        self.wheel_slot = 0
        self.conn = ClientConnection(broker, self, authenticator, authorizer)

    @property
    def peer(self) -> str:
        """The client's address as "ip:port" ("-" when unknown), for logs and authenticators.

        Set by the listener when a PROXY header named it; otherwise asked of the transport and
        formatted on first use, so that a connection nobody asks about costs nothing for it."""
        peer = self._peer
        if peer is None:
            peer = "-"
            transport = self._transport
            if transport is not None:
                try:
                    address = transport.get_extra_info("peername")
                except (AttributeError, OSError):  # uvloop, once its handle is closed
                    address = None
                if isinstance(address, tuple) and len(address) >= 2:
                    peer = f"{address[0]}:{address[1]}"
                self._peer = peer  # an address asked before the transport is up is not kept
        return peer

    @peer.setter
    def peer(self, value: str) -> None:
        self._peer = value

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self._attach(transport)
        # The peer's address is not formatted here: only a log line or an authenticator that
        # uses it asks for it (``peer``); most connections never do.
        # No TCP_NODELAY here: asyncio and uvloop set it on every TCP transport they create
        # (accepted, PROXY hand-off, under TLS); one more setsockopt per connect was waste.
        self.conn.last_seen = self._clock()
        if self.on_made is not None:
            self.on_made(self, transport)

    def data_received(self, data: bytes) -> None:
        if self._closing:  # closed, lingering for the client's side: read and dropped (not
            self._stats.bytes_received += len(data)  # kept behind the rest of a read)
            return
        now = self._clock()
        if now >= self._fence.deadline:  # the lease is not proven: act on nothing read
            self._hold(data)
            return
        conn = self.conn
        conn.last_seen = now
        self._stats.bytes_received += len(data)
        # what this read writes is written at its end (core.turn_flush: no call_soon)
        scheduler = self._scheduler
        outer = scheduler.begin_read()
        try:
            if conn.state == CONNECTED and not self.reader.pending and self._backlog is None:
                first = data[0]
                if first == 0x40:
                    # the common read of a fan-out subscriber: one PUBACK (no list for it)
                    packet_id = plain_puback_id(data)
                    if packet_id:
                        conn.on_plain_puback(packet_id)
                        return
                    acked = plain_puback_ids(data) if len(data) != 4 else None
                    if acked is not None:
                        conn.on_pubacks(acked)
                        return
                elif first & 0xF0 == 0x30:
                    # one plain PUBLISH: the common read of a device
                    plain = self._plain
                    if plain is None:
                        plain = self._plain = PlainRead()
                    if read_plain(data, conn.version, self.reader.max_packet_size, plain):
                        payload = plain.payload
                        tail = plain.tail
                        plain.payload = plain.tail = b""  # (not held past the read)
                        topic = plain.topic
                        qos = plain.qos
                        packet_id = plain.packet_id
                        wire = (plain.head, tail)
                        route_publish(conn, topic, qos, False, payload, None, packet_id, wire)
                        if conn.fanning_out:
                            self._defer([], None)
                        return
            if self._backlog is not None:  # a transport that ignored pause_reading
                if self._backlog_error is None:
                    self.reader.feed(data, 0)  # kept undecoded, after the rest of the read
                return
            self._handle_slice(data)
            self._check_pending()
        finally:
            if outer:
                scheduler.end_read(now)

    def _check_pending(self) -> None:
        """Before CONNACK only a small partial packet may wait (``accepts_pending``)."""
        pending = self.reader.pending
        conn = self.conn
        if (
            pending
            and conn.state != CONNECTED
            and not self._closing
            and not accepts_pending(conn, len(pending))
        ):
            refuse_pending(conn)
            self._closing = True

    def _handle_slice(self, data: bytes) -> bool:
        """Decode packets (first the backlog's, then ``data`` and the bytes the reader kept)
        and hand them to the core in order, until this turn's packets have planned
        ``READ_SLICE_DELIVERIES`` deliveries; the rest goes to the next loop turn, mostly
        undecoded. False when some of it waits (``_defer``)."""
        conn = self.conn
        reader = self.reader
        stats = self._stats
        started = stats.deliveries_routed
        packets = self._backlog
        error = self._backlog_error
        if packets is None:  # a new read (no tuple, no list made for it: the common case)
            packets = _NO_PACKETS
        else:
            self._backlog = None
            self._backlog_error = None
        index = 0
        handled = 0  # packets handled this turn
        while True:
            if index == len(packets):
                if error is not None:
                    if not self._closing:
                        protocol_error(conn, error)
                        self._closing = True
                    return True
                if not data and not reader.more:
                    return True
                # as many as the turn may still handle if they route nothing, a batch at most
                left = READ_SLICE_DELIVERIES - (stats.deliveries_routed - started)
                wanted = (left + PACKET_WORK - 1) // PACKET_WORK + 1 - handled
                try:
                    packets = reader.feed(data, min(max(wanted, 1), DECODE_BATCH))
                except ProtocolError as bad:
                    packets = bad.decoded  # complete packets that came before the bad one
                    error = bad
                data = b""
                index = 0
                if not packets and error is None:
                    return True  # a partial packet waits for its bytes
                continue
            if self._closing:
                return True
            packet = packets[index]
            index += 1
            conn.handle(packet)
            if conn.fanning_out:  # its fan-out goes on in later turns: so does the read
                self._defer(packets[index:], error)
                return False
            work = stats.deliveries_routed - started + handled * PACKET_WORK
            handled += 1
            if work >= READ_SLICE_DELIVERIES and (index < len(packets) or reader.more):
                self._defer(packets[index:], error)
                return False

    def _defer(self, packets: list[Packet], error: ProtocolError | None) -> None:
        """Keep the rest of a read for a later loop turn, reading paused meanwhile."""
        self._backlog = packets
        self._backlog_error = error
        if self._transport is not None:
            self._transport.pause_reading()
        self.conn.broker.loop.call_soon(self._resume_backlog)

    def _resume_backlog(self) -> None:
        if self.conn.fanning_out and not self._closing:  # still routing a PUBLISH's fan-out
            self.conn.broker.loop.call_soon(self._resume_backlog)
            return
        if self._backlog is None:
            return
        if self._closing:
            self._take_backlog()
            return
        if self._handle_slice(b""):
            self._check_pending()
            if not self._held:
                self.resume_reading()

    def _take_backlog(self) -> tuple[list[Packet] | None, ProtocolError | None]:
        """The decoded rest of a sliced read and its error, cleared. (A method, not a swap in
        ``_resume_backlog``: there mypy would narrow ``self._backlog`` to None across
        ``_handle_slice``, which may set it again, and mypyc compiles that narrowing.)"""
        taken = self._backlog, self._backlog_error
        self._backlog = None
        self._backlog_error = None
        return taken

    def _hold(self, data: bytes) -> None:
        """Keep bytes read while the lease is not proven (``core.lease_fence``), reading
        paused meanwhile: what a client sends during a Redis outage stays in the kernel's
        buffers, not in this process (one read per connection at most)."""
        fenced = self._fenced
        if fenced is None:
            fenced = self._fenced = []
        if not fenced:
            self._fence.hold(self._release_held)
            if self._transport is not None and not self._closing:
                self._transport.pause_reading()
        fenced.append(data)

    def _release_held(self) -> None:
        held = self._fenced
        self._fenced = None
        if held is not None:
            for data in held:
                if self._closing:  # the node went offline meanwhile: nothing was acknowledged
                    return
                self.data_received(data)
        if (
            not self._fenced  # (held again: the lease lapsed once more)
            and not self._held  # nor paused by the core (a throttle, the store)
            and self._backlog is None
            and self._transport is not None
            and not self._closing
        ):
            self._transport.resume_reading()

    def login_accepted(self) -> None:
        """The core accepted the login: its connect deadline leaves the wheel now, not when
        its slot comes round (an entry, and the reference to this connection, held for
        ``connect_timeout_s``; a due check that would find nothing to do)."""
        if self.wheel_slot:
            self.conn.broker.deadlines.remove(self)

    def wheel_due(self, now: float) -> float | None:
        """The broker's deadline wheel: this connection's connect timeout is due."""
        if self.on_deadline is not None:
            self.on_deadline(self)
        return None

    def eof_received(self) -> bool | None:
        self._transport_open = False  # the transport closes itself on return: no more writes
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._transport_open = False
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        self._drop_output()
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

    # -- ClientLink (the reading side; the writing side is ClientOutput's) ------------------

    def pause_reading(self) -> None:
        self._held = True
        if self._transport is not None and not self._closing:
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._held = False
        if self._transport is not None and not self._closing and self._backlog is None:
            self._transport.resume_reading()
