"""One MQTT connection of the load client: an ``asyncio.Protocol`` with an inline hot path.

Inbound PUBLISH frames are split, acknowledged (PUBACKs of one read are written together) and
accounted without building any object per message: the 16-byte payload is always the last 16
bytes of the frame, so topic and properties need not be parsed.

QoS 2 (the survivability scenario): a publisher keeps each PUBLISH until its PUBREC and each id
until its PUBCOMP (``qos2_out``; a reconnect resumes them: PUBLISH again with DUP, or PUBREL);
a subscriber answers PUBREC, keeps the id until PUBREL (``qos2_in``, the session's, shared by
its connections) and counts a PUBLISH whose id it still keeps as the same message sent again,
not as a duplicate (MQTT 4.3.3: the receiver's packet id state is what makes it exactly once).
"""

from __future__ import annotations

import asyncio
from time import monotonic_ns
from typing import cast

from xmq.bench.accounting import SeqTracker
from xmq.bench.histogram import BUCKETS
from xmq.bench.packets import (
    CONNACK,
    DISCONNECT,
    DISCONNECT_EXPIRE_SESSION_PACKET,
    DISCONNECT_PACKET,
    MQTT_V5,
    PAYLOAD,
    PINGREQ_PACKET,
    SUBACK,
    Connack,
    Frame,
    PublishTemplate,
    decode_connack,
    decode_suback,
    decode_varint,
)

_unpack_payload = PAYLOAD.unpack_from


class IntervalCounters:
    """What one worker counted during the current interval (swapped at each boundary)."""

    __slots__ = (
        "sent",
        "delivered",
        "duplicates",
        "hist",
        "lat_sum_us",
        "lat_max_us",
        "send_lag_max_us",
        "held_back",
        "connection_losses",
    )

    def __init__(self) -> None:
        self.sent = 0
        self.delivered = 0
        self.duplicates = 0
        self.hist = [0] * BUCKETS
        self.lat_sum_us = 0
        self.lat_max_us = 0
        self.send_lag_max_us = 0
        self.held_back = 0
        self.connection_losses = 0


class CounterSink:
    """Holder of the worker's current counters, shared by all its connections."""

    __slots__ = ("ack_errors", "counters", "disconnect_reasons", "live")

    def __init__(self) -> None:
        self.counters = IntervalCounters()
        self.disconnect_reasons: dict[int, int] = {}
        self.ack_errors: dict[int, int] = {}
        """PUBACK / PUBREC reason codes >= 0x80 or 0x10 (not stored, or stored for nobody)
        received by publishers: reason -> count."""
        self.live = 0

    def record_lag(self, lag_us: int) -> None:
        counters = self.counters
        if lag_us > counters.send_lag_max_us:
            counters.send_lag_max_us = lag_us

    def swap(self) -> IntervalCounters:
        done = self.counters
        self.counters = IntervalCounters()
        return done


class BenchConnection(asyncio.Protocol):
    """A publisher, a subscriber, or an idle client (all three share this class)."""

    def __init__(
        self,
        sink: CounterSink,
        connect_packet: bytes,
        *,
        protocol: int = MQTT_V5,
        trackers: dict[int, SeqTracker] | None = None,
        template: PublishTemplate | None = None,
        publisher_id: int = -1,
        qos2_in: set[int] | None = None,
    ) -> None:
        self.sink = sink
        self.qos2_in: set[int] = qos2_in if qos2_in is not None else set()
        """Inbound QoS 2 ids received (PUBREC sent), not yet released (the session's state)."""
        self.qos2_out: dict[int, bytes | None] = {}
        """Outbound QoS 2: id -> PUBLISH awaiting its PUBREC, or None awaiting its PUBCOMP."""
        self.protocol = protocol
        self.trackers: dict[int, SeqTracker] = trackers if trackers is not None else {}
        self.template = template
        self.publisher_id = publisher_id
        self.transport: asyncio.Transport | None = None
        self.connect_packet = connect_packet
        self.connect_sent_ns = 0
        self.connack_ns = 0
        self.session_present = False
        loop = asyncio.get_running_loop()
        self.connack: asyncio.Future[Connack] = loop.create_future()
        self.suback: asyncio.Future[list[int]] | None = None
        self.closed: asyncio.Future[None] = loop.create_future()
        self.receive_maximum = 65535
        self.inflight = 0
        self.backlog = 0
        self.next_packet_id = 0
        self.seq = 0
        self.closing = False
        self.connected = False
        self._rest = b""

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's class is not a subclass
        self.transport = transport
        self.connect_sent_ns = monotonic_ns()
        transport.write(self.connect_packet)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.connected:
            self.sink.live -= 1
            self.connected = False
            if not self.closing:
                self.sink.counters.connection_losses += 1
        error = ConnectionError(f"connection lost: {exc!r}" if exc else "connection closed")
        for future in (self.connack, self.suback):
            if future is not None and not future.done():
                future.set_exception(error)
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self._rest:
            data = self._rest + data
            self._rest = b""
        now = monotonic_ns()
        counters = self.sink.counters
        hist = counters.hist
        trackers = self.trackers
        acks: list[bytes] | None = None
        size = len(data)
        pos = 0
        while size - pos >= 2:
            first = data[pos]
            length = data[pos + 1]
            start = pos + 2
            if length & 0x80:
                decoded = decode_varint(data, pos + 1)
                if decoded is None:
                    break
                length, start = decoded
            end = start + length
            if end > size:
                break
            kind = first >> 4
            if kind == 3:
                if first & 0x06:
                    at = start + 2 + ((data[start] << 8) | data[start + 1])
                    if first & 0x04:  # QoS 2: PUBREC; an id still kept: the same message again
                        ack = b"\x50\x02" + data[at : at + 2]
                        packet_id = (data[at] << 8) | data[at + 1]
                        if packet_id in self.qos2_in:
                            length = 0  # not counted again
                        else:
                            self.qos2_in.add(packet_id)
                    else:
                        ack = b"\x40\x02" + data[at : at + 2]
                    if acks is None:
                        acks = [ack]
                    else:
                        acks.append(ack)
                if length >= 18:
                    sent_ns, seq, publisher = _unpack_payload(data, end - 16)
                    tracker = trackers.get(publisher)
                    if tracker is None:
                        tracker = trackers[publisher] = SeqTracker()
                    # SeqTracker.record, inlined for the common case (bitmap large enough)
                    bits = tracker.bits
                    index = seq >> 3
                    if index < len(bits):
                        byte = bits[index]
                        mask = 1 << (seq & 7)
                        fresh = not byte & mask
                        if fresh:
                            bits[index] = byte | mask
                            tracker.unique += 1
                            if seq > tracker.highest:
                                tracker.highest = seq
                            else:
                                tracker.out_of_order += 1
                        else:
                            tracker.duplicates += 1
                    else:
                        fresh = tracker.record(seq)
                    if fresh:
                        latency = (now - sent_ns) // 1000
                        # histogram.bucket_index, inlined
                        if latency < 32:
                            bucket = latency if latency > 0 else 0
                        else:
                            shift = latency.bit_length() - 5
                            bucket = (shift << 4) + (latency >> shift)
                            if bucket >= BUCKETS:
                                bucket = BUCKETS - 1
                        hist[bucket] += 1
                        counters.delivered += 1
                        counters.lat_sum_us += latency
                        if latency > counters.lat_max_us:
                            counters.lat_max_us = latency
                    else:
                        counters.duplicates += 1
            elif kind == 4:
                if length > 2 and (data[start + 2] >= 0x80 or data[start + 2] == 0x10):
                    errors = self.sink.ack_errors
                    errors[data[start + 2]] = errors.get(data[start + 2], 0) + 1
                self.inflight -= 1
                if self.backlog:
                    self.backlog -= 1
                    self._send(1, now)
            elif 5 <= kind <= 7:
                reply = self._qos2_flow(kind, data[start:end])
                if reply is not None:
                    if acks is None:
                        acks = [reply]
                    else:
                        acks.append(reply)
                if kind == 7 and self.backlog:
                    self.backlog -= 1
                    self._send(1, now)
            else:
                self._control(Frame(first, data[start:end]))
            pos = end
        if pos < size:
            self._rest = data[pos:]
        if acks is not None and self.transport is not None:
            self.transport.write(acks[0] if len(acks) == 1 else b"".join(acks))

    def _qos2_flow(self, kind: int, body: bytes) -> bytes | None:
        """PUBREC (5) / PUBCOMP (7) of a QoS 2 publisher, PUBREL (6) to a subscriber; the
        packet to answer with, if any."""
        head = body[:2]
        packet_id = int.from_bytes(head, "big")
        if kind == 6:  # PUBREL: the exchange ends here
            self.qos2_in.discard(packet_id)
            return b"\x70\x02" + head
        if packet_id not in self.qos2_out:
            return None
        if kind == 5 and len(body) > 2 and (body[2] >= 0x80 or body[2] == 0x10):
            errors = self.sink.ack_errors
            errors[body[2]] = errors.get(body[2], 0) + 1
        if kind == 5 and not (len(body) > 2 and body[2] >= 0x80):
            self.qos2_out[packet_id] = None  # received: PUBREL, then wait for the PUBCOMP
            return b"\x62\x02" + head
        del self.qos2_out[packet_id]  # PUBCOMP, or a PUBREC with an error: the exchange ends
        self.inflight -= 1
        return None

    def resume_qos2(self, unfinished: dict[int, bytes | None], next_packet_id: int) -> None:
        """After a CONNACK with Session Present: go on with the previous connection's QoS 2
        exchanges (PUBLISH again with DUP for those without PUBREC, PUBREL for the others)."""
        self.next_packet_id = next_packet_id
        self.qos2_out = dict(unfinished)
        self.inflight += len(unfinished)
        frames = [
            b"\x62\x02" + packet_id.to_bytes(2, "big")
            if frame is None
            else bytes((frame[0] | 0x08,)) + frame[1:]
            for packet_id, frame in unfinished.items()
        ]
        if frames and self.transport is not None:
            self.transport.write(b"".join(frames))

    # -- control path -----------------------------------------------------------------------
    def _control(self, frame: Frame) -> None:
        kind = frame.packet_type
        if kind == CONNACK:
            self.connack_ns = monotonic_ns()
            try:
                connack = decode_connack(frame, self.protocol)
            except ValueError as exc:
                if not self.connack.done():
                    self.connack.set_exception(exc)
                return
            if connack.reason_code == 0:
                self.session_present = connack.session_present
                self.connected = True
                self.sink.live += 1
                self.receive_maximum = connack.receive_maximum
            if not self.connack.done():
                self.connack.set_result(connack)
        elif kind == SUBACK:
            if self.suback is not None and not self.suback.done():
                try:
                    self.suback.set_result(decode_suback(frame, self.protocol)[1])
                except ValueError as exc:
                    self.suback.set_exception(exc)
        elif kind == DISCONNECT:
            reason = frame.body[0] if frame.body else 0
            reasons = self.sink.disconnect_reasons
            reasons[reason] = reasons.get(reason, 0) + 1

    # -- actions ----------------------------------------------------------------------------
    def subscribe(self, packet: bytes) -> asyncio.Future[list[int]]:
        self.suback = asyncio.get_running_loop().create_future()
        if self.transport is not None:
            self.transport.write(packet)
        return self.suback

    def publish(self, count: int, now_ns: int) -> None:
        """Send ``count`` scheduled messages now; beyond the broker's window they wait."""
        room = self.receive_maximum - self.inflight
        if self.template is not None and self.template.qos == 0:
            room = count
        if count > room:
            held = count - max(room, 0)
            self.backlog += held
            self.sink.counters.held_back += held
            count = max(room, 0)
        if count:
            self._send(count, now_ns)

    def _send(self, count: int, now_ns: int) -> None:
        template = self.template
        transport = self.transport
        if template is None or transport is None or transport.is_closing():
            return
        publisher = self.publisher_id
        seq = self.seq
        packet_id = self.next_packet_id
        frames = []
        keep = self.qos2_out if template.qos == 2 else None
        for _ in range(count):
            packet_id = packet_id + 1 if packet_id < 65535 else 1
            frame = template.encode(packet_id, now_ns, seq, publisher)
            if keep is not None:
                keep[packet_id] = frame
            frames.append(frame)
            seq += 1
        self.seq = seq
        self.next_packet_id = packet_id
        if template.qos:
            self.inflight += count
        self.sink.counters.sent += count
        transport.write(frames[0] if count == 1 else b"".join(frames))

    def ping(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(PINGREQ_PACKET)

    def disconnect(self, *, expire_session: bool = False) -> None:
        """Normal DISCONNECT; ``expire_session`` (MQTT 5) also ends a persistent session."""
        self.closing = True
        transport = self.transport
        if transport is not None and not transport.is_closing():
            if expire_session and self.protocol == MQTT_V5:
                transport.write(DISCONNECT_EXPIRE_SESSION_PACKET)
            else:
                transport.write(DISCONNECT_PACKET)
            transport.close()


async def wait_closed_or_abort(connections: list[BenchConnection], grace_s: float = 2.0) -> None:
    """After ``disconnect()``: wait for the connections to close, abort those still open.

    uvloop's ``close()`` keeps a transport until its buffer is written; a peer that no longer
    reads would keep the event loop from closing at the end of ``uvloop.run``.
    """
    pending = [c.closed for c in connections if not c.closed.done()]
    if pending:
        await asyncio.wait(pending, timeout=grace_s)
    for connection in connections:
        if connection.transport is not None and not connection.closed.done():
            connection.transport.abort()
