"""A read of many packets is decoded a slice at a time: each loop turn decodes about what it
handles, the rest stays bytes in the reader (``PacketReader.buffered``), and a malformed
packet further on is answered when it is reached."""

from __future__ import annotations

import asyncio
from typing import cast

from tests.support.recording_transport import RecordingTransport
from tests.support.virtual_loop import VirtualLoop
from xmq.codec.packets import MQTT_5, Connect, Disconnect, Packet, Pingresp, Puback, Publish
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.session import Session, Subscription
from xmq.core.settings import CoreSettings
from xmq.net.client_protocol import (
    DECODE_BATCH,
    PACKET_WORK,
    READ_SLICE_DELIVERIES,
    FlushScheduler,
    MqttClientProtocol,
)

_PER_TURN = READ_SLICE_DELIVERIES // PACKET_WORK + 1
"""Packets handled in one turn when they route nothing (513)."""


def _setup(sessions: int = 0) -> tuple[Broker, VirtualLoop, MqttClientProtocol, RecordingTransport]:
    loop = VirtualLoop()
    broker = Broker(CoreSettings())
    broker._loop = cast(asyncio.AbstractEventLoop, loop)
    for n in range(sessions):  # offline persistent sessions on bcast/#
        session = Session(f"offline-{n}", broker.settings.queues, broker.stats, expiry_s=600)
        broker.sessions[session.client_id] = session
        broker.subscribe(session, Subscription(session, "bcast/#", 1))
    scheduler = FlushScheduler(cast(asyncio.AbstractEventLoop, loop))
    protocol = MqttClientProtocol(broker, AnonymousAuthenticator(), AllowAll(), scheduler, 1 << 20)
    transport = RecordingTransport()
    protocol.connection_made(cast(asyncio.Transport, transport))
    protocol.data_received(encode(Connect(client_id="flood"), MQTT_5))
    loop.run_turn()
    transport.sent.clear()  # the CONNACK
    return broker, loop, protocol, transport


def _paused(transport: RecordingTransport) -> bool:
    return not transport.reading  # (a call: mypy would narrow the attribute across the turns)


def _publish(topic: str, n: int) -> bytes:
    """A QoS 1 PUBLISH of a fixed size (packet ids and payloads of five digits)."""
    return encode(Publish(topic=topic, payload=b"%05d" % n, qos=1, packet_id=10_000 + n), MQTT_5)


def _answers(transport: RecordingTransport) -> list[Packet]:
    return PacketReader(protocol_version=MQTT_5).feed(bytes(transport.sent))


def _acked(transport: RecordingTransport) -> list[int]:
    return [p.packet_id - 10_000 for p in _answers(transport) if isinstance(p, Puback)]


def _turns(loop: VirtualLoop, protocol: MqttClientProtocol, size: int) -> list[tuple[int, int]]:
    """Run the loop's turns; per turn, the packets decoded (bytes the reader no longer holds,
    over the packet size) and the PUBLISH packets routed."""
    stats = protocol.conn.broker.stats
    per_turn = []
    while loop.pending():
        buffered, received = protocol.reader.buffered, stats.messages_received
        loop.run_turn()
        decoded = buffered - protocol.reader.buffered
        assert decoded % size == 0
        per_turn.append((decoded // size, stats.messages_received - received))
    return per_turn


def test_a_read_of_5000_packets_is_decoded_a_slice_per_turn() -> None:
    broker, loop, protocol, transport = _setup()
    count = 5000
    size = len(_publish("nobody/x", 1))
    flood = b"".join(_publish("nobody/x", n) for n in range(count))
    protocol.data_received(flood)
    # the first turn decoded what it handled, no more (the old code decoded all 5,000)
    assert broker.stats.messages_received == _PER_TURN
    assert protocol.reader.buffered == (count - _PER_TURN) * size
    assert _paused(transport)
    turns = _turns(loop, protocol, size)
    assert sum(decoded for decoded, _ in turns) == count - _PER_TURN
    assert all(decoded == routed <= _PER_TURN for decoded, routed in turns)
    assert protocol.reader.buffered == 0
    assert not _paused(transport)
    assert _acked(transport) == list(range(count))  # every PUBACK, in order


def test_a_turn_cut_short_by_fan_out_decodes_at_most_a_batch_ahead() -> None:
    sessions = 200  # each PUBLISH routes 200 deliveries: 20 of them per turn
    broker, loop, protocol, transport = _setup(sessions)
    count = 300
    size = len(_publish("bcast/x", 1))
    protocol.data_received(b"".join(_publish("bcast/x", n) for n in range(count)))
    first = broker.stats.messages_received
    work = first * sessions + (first - 1) * PACKET_WORK  # the packets' deliveries and own work
    assert work >= READ_SLICE_DELIVERIES > work - sessions - PACKET_WORK
    assert protocol.reader.buffered >= (count - first - DECODE_BATCH) * size
    decoded_ahead = count - first - protocol.reader.buffered // size
    for decoded, routed in _turns(loop, protocol, size):
        assert routed <= first
        decoded_ahead += decoded - routed
        assert 0 <= decoded_ahead < DECODE_BATCH
    assert _acked(transport) == list(range(count))
    assert [d.message.payload for d in broker.sessions["offline-0"].queue] == [
        b"%05d" % n for n in range(count)
    ]


def test_a_malformed_packet_further_on_is_answered_when_reached() -> None:
    broker, loop, protocol, transport = _setup()
    good = b"".join(_publish("nobody/x", n) for n in range(2000))
    malformed = b"\x60\x02\x00\x01"  # PUBREL with its reserved flags wrong
    after = _publish("nobody/x", 2000)
    protocol.data_received(good + malformed + after)
    assert broker.stats.messages_received == _PER_TURN
    assert protocol.reader.buffered > 0  # not decoded yet: nothing refused so far
    assert not any(isinstance(p, Disconnect) for p in _answers(transport))
    protocol.flush()
    while loop.pending():
        loop.run_turn()
    answers = _answers(transport)
    assert [p.packet_id - 10_000 for p in answers[:-1] if isinstance(p, Puback)] == list(
        range(2000)
    )
    assert isinstance(answers[-1], Disconnect) and answers[-1].reason_code == 0x81
    assert broker.stats.messages_received == 2000  # nothing after the malformed packet


def test_bytes_read_while_the_rest_waits_are_kept_behind_it() -> None:
    broker, loop, protocol, transport = _setup()
    size = len(_publish("nobody/x", 1))
    protocol.data_received(b"".join(_publish("nobody/x", n) for n in range(1000)))
    # a transport that read on although paused; the second read ends in a partial packet
    second = b"".join(_publish("nobody/x", n) for n in range(1000, 1500))
    protocol.data_received(second + _publish("nobody/x", 1500)[:5])
    assert broker.stats.messages_received == _PER_TURN
    assert protocol.reader.buffered == (1500 - _PER_TURN) * size + 5
    while loop.pending():
        loop.run_turn()
    assert protocol.reader.buffered == 5
    protocol.data_received(_publish("nobody/x", 1500)[5:])
    loop.run_turn()
    assert _acked(transport) == list(range(1501))


def test_a_ping_flood_is_answered_a_slice_per_turn() -> None:
    broker, loop, protocol, transport = _setup()
    protocol.data_received(b"\xc0\x00" * 5000)  # PINGREQ
    assert protocol.reader.buffered == 2 * (5000 - _PER_TURN)
    turns = _turns(loop, protocol, 2)
    assert max(decoded for decoded, _ in turns) <= _PER_TURN
    assert [type(p) for p in _answers(transport)] == [Pingresp] * 5000


def test_what_a_closed_connection_reads_is_dropped_not_kept() -> None:
    broker, loop, protocol, transport = _setup()
    first = encode(Connect(client_id="again"), MQTT_5) + _publish("nobody/x", 0) * 1000
    protocol.data_received(first)  # a second CONNECT: refused, the connection closes
    closing = _answers(transport)[-1]
    assert isinstance(closing, Disconnect) and closing.reason_code == 0x82
    assert protocol.reader.buffered < len(first)  # the rest of that read, at most
    kept = protocol.reader.buffered
    for _ in range(20):  # the client goes on sending while the close lingers
        protocol.data_received(_publish("nobody/x", 1) * 1000)
    assert protocol.reader.buffered == kept  # not added behind it (it grew to 400 kB)
    while loop.pending():
        loop.run_turn()
    assert broker.stats.messages_received == 0
