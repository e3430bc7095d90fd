"""One read of many PUBLISH packets with a large fan-out is handled over several loop turns,
and so is one PUBLISH whose own fan-out is too large for one turn."""

from __future__ import annotations

import asyncio
from typing import cast

from tests.support.virtual_loop import VirtualLoop
from xmq.codec.packets import MQTT_5, Connect, Puback, Publish
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.fanout_slices import SLICE
from xmq.core.session import Session, Subscription
from xmq.core.settings import CoreSettings
from xmq.net.client_protocol import (
    PACKET_WORK,
    READ_SLICE_DELIVERIES,
    FlushScheduler,
    MqttClientProtocol,
)
from xmq.net.publish_throttle import ThrottledClientProtocol

_SESSIONS = 200
_MESSAGES = 300


class _Transport:
    def __init__(self) -> None:
        self.out = bytearray()
        self.paused = False

    def write(self, data: bytes) -> None:
        self.out += data

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 1) if name == "peername" else None


def _setup(
    throttle: tuple[float, int] | None = None, sessions: int = _SESSIONS
) -> tuple[Broker, VirtualLoop, MqttClientProtocol, _Transport]:
    loop = VirtualLoop()
    broker = Broker(CoreSettings())
    broker._loop = cast(asyncio.AbstractEventLoop, loop)
    for n in range(sessions):  # offline persistent sessions on bcast/#
        session = Session(f"offline-{n}", broker.settings.queues, broker.stats, expiry_s=600)
        broker.sessions[session.client_id] = session
        broker.subscribe(session, Subscription(session, "bcast/#", 1))
    scheduler = FlushScheduler(cast(asyncio.AbstractEventLoop, loop))
    protocol: MqttClientProtocol
    if throttle is None:
        protocol = MqttClientProtocol(
            broker, AnonymousAuthenticator(), AllowAll(), scheduler, 1 << 20
        )
    else:
        rate, burst = throttle
        protocol = ThrottledClientProtocol(
            broker, AnonymousAuthenticator(), AllowAll(), scheduler, 1 << 20, rate, burst
        )
    transport = _Transport()
    protocol.connection_made(cast(asyncio.Transport, transport))
    protocol.data_received(encode(Connect(client_id="flood"), MQTT_5))
    loop.run_turn()
    return broker, loop, protocol, transport


def _flood(messages: int = _MESSAGES) -> bytes:
    return b"".join(
        encode(Publish(topic="bcast/x", payload=str(n).encode(), qos=1, packet_id=n), MQTT_5)
        for n in range(1, messages + 1)
    )


def _per_turn(fan_out: int) -> int:
    """Packets handled in one turn: until their deliveries and packets reach the slice."""
    count = 1
    while count * fan_out + (count - 1) * PACKET_WORK < READ_SLICE_DELIVERIES:
        count += 1
    return count


def _paused(transport: _Transport) -> bool:
    return transport.paused


def _pubacks(transport: _Transport) -> list[int]:
    packets = PacketReader(protocol_version=MQTT_5).feed(bytes(transport.out))
    return [p.packet_id for p in packets if isinstance(p, Puback)]


def test_a_flood_in_one_read_is_routed_a_slice_per_turn_in_order() -> None:
    broker, loop, protocol, transport = _setup()
    received = broker.stats.messages_received
    protocol.data_received(_flood())
    per_turn = _per_turn(_SESSIONS)
    assert broker.stats.messages_received - received == per_turn
    assert _paused(transport)  # nothing more is read until the backlog is done
    turns = 0
    while loop.pending():
        before = broker.stats.messages_received
        loop.run_turn()
        turns += 1
        assert broker.stats.messages_received - before <= per_turn
    assert broker.stats.messages_received - received == _MESSAGES
    assert turns >= _MESSAGES // per_turn
    assert not _paused(transport)
    assert _pubacks(transport) == list(range(1, _MESSAGES + 1))  # every PUBACK, in order
    first = broker.sessions["offline-0"]
    assert len(first.queue) == _MESSAGES


def test_a_pause_by_the_core_outlives_the_backlog() -> None:
    broker, loop, protocol, transport = _setup()
    protocol.data_received(_flood())
    protocol.pause_reading()  # e.g. the held-acks window filled meanwhile
    while loop.pending():
        loop.run_turn()
    assert _paused(transport)
    protocol.resume_reading()
    assert not _paused(transport)


def test_packets_that_reach_no_one_are_sliced_too() -> None:
    broker, loop, protocol, transport = _setup()
    received = broker.stats.messages_received
    protocol.data_received(
        b"".join(
            encode(Publish(topic=f"retained/{n}", payload=b"r", qos=0, retain=True), MQTT_5)
            for n in range(2000)
        )
    )
    assert broker.stats.messages_received - received == _per_turn(0)
    while loop.pending():
        loop.run_turn()
    assert broker.stats.messages_received - received == 2000
    assert len(broker.retained) == 2000


def test_a_throttled_publisher_is_charged_for_every_slice() -> None:
    broker, loop, protocol, transport = _setup(throttle=(100.0, 10))
    assert isinstance(protocol, ThrottledClientProtocol)
    protocol.data_received(_flood())
    for _ in range(1000):  # the turns due now (the throttle's resume is due seconds later)
        if not loop.run_turn():
            break
    assert _pubacks(transport) == list(range(1, _MESSAGES + 1))
    assert protocol._bucket.tokens == 10 - _MESSAGES  # all of them, not the first slice
    assert _paused(transport)  # until the debt is repaid


def test_one_publish_with_a_huge_fan_out_is_routed_a_slice_per_turn() -> None:
    sessions = 5 * SLICE + 100
    broker, loop, protocol, transport = _setup(sessions=sessions)
    stats = broker.stats
    routed = stats.deliveries_routed
    protocol.data_received(_flood(3))  # three PUBLISHes in one read, each to every session
    assert stats.deliveries_routed - routed <= SLICE  # the old code: the first 5,220 at once
    assert stats.messages_received == 1  # the next packets wait for the first's fan-out
    assert _paused(transport)
    assert _pubacks(transport) == []  # acknowledged after its last slice only
    turns = 0
    acked_after: dict[int, int] = {}
    while loop.pending():
        before = stats.deliveries_routed
        loop.run_turn()
        protocol.flush()
        turns += 1
        assert stats.deliveries_routed - before <= SLICE
        for packet_id in _pubacks(transport):
            acked_after.setdefault(packet_id, stats.deliveries_routed - routed)
    assert stats.deliveries_routed - routed == 3 * sessions
    assert turns >= 3 * sessions // SLICE
    assert _pubacks(transport) == [1, 2, 3]
    assert acked_after[1] >= sessions  # PUBACK 1 only once every session had message 1
    assert acked_after[2] >= 2 * sessions
    assert not _paused(transport)
    for name in ("offline-0", f"offline-{sessions - 1}"):  # first and last slice: in order
        queue = broker.sessions[name].queue
        assert [d.message.payload for d in queue] == [b"1", b"2", b"3"]


def test_the_plain_publish_fast_path_waits_for_its_fan_out_too() -> None:
    sessions = 2 * SLICE + 1
    broker, loop, protocol, transport = _setup(sessions=sessions)
    protocol.data_received(_flood(1))  # one plain PUBLISH in a read: the adapter's fast path
    assert broker.stats.deliveries_routed <= SLICE
    assert _paused(transport)
    protocol.data_received(_flood(2)[len(_flood(1)) :])  # a transport that read on anyway
    assert broker.stats.messages_received == 1  # kept in the backlog, in order
    while loop.pending():
        loop.run_turn()
    protocol.flush()
    assert _pubacks(transport) == [1, 2]
    assert not _paused(transport)
    assert [d.message.payload for d in broker.sessions["offline-0"].queue] == [b"1", b"2"]
