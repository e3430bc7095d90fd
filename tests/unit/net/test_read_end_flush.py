"""What a client's read writes is written at the end of that read (no ``call_soon``): the
PUBLISH to the subscriber and the PUBACK to the publisher, a ``write`` each. A client written at
the same loop time already waits for the turn's flush, which then takes every later read's
output of the turn: writes still coalesce per loop turn."""

from __future__ import annotations

import asyncio
from typing import cast

from tests.support.virtual_loop import VirtualLoop
from xmq.codec.packets import (
    MQTT_5,
    Connect,
    Packet,
    Puback,
    Publish,
    Subscribe,
    SubscriptionRequest,
)
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.settings import CoreSettings
from xmq.net.client_protocol import FlushScheduler, MqttClientProtocol


class _Transport:
    """Keeps each ``write`` call's bytes apart: the test counts system calls. ``closing`` is
    what ``is_closing`` says (``asked_closing``: how often it was asked); ``refuse`` makes a
    write raise as uvloop's does on a transport whose handle is closed."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closing = False
        self.refuse = False
        self.asked_closing = 0

    def write(self, data: bytes) -> None:
        if self.refuse:
            raise RuntimeError("unable to perform operation on <TCPTransport closed=True>")
        self.writes.append(bytes(data))

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        self.asked_closing += 1
        return self.closing

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 1) if name == "peername" else None

    def packets(self) -> list[list[Packet]]:
        """The packets of each write, taken."""
        taken, self.writes = self.writes, []
        return [PacketReader(protocol_version=MQTT_5).feed(data) for data in taken]


class _Node:
    def __init__(self) -> None:
        self.loop = VirtualLoop()
        self.broker = Broker(CoreSettings())
        self.broker._loop = cast(asyncio.AbstractEventLoop, self.loop)
        self.scheduler = FlushScheduler(cast(asyncio.AbstractEventLoop, self.loop))

    def client(self, client_id: str) -> tuple[MqttClientProtocol, _Transport]:
        protocol = MqttClientProtocol(
            self.broker, AnonymousAuthenticator(), AllowAll(), self.scheduler, 1 << 20
        )
        transport = _Transport()
        protocol.connection_made(cast(asyncio.Transport, transport))
        protocol.data_received(encode(Connect(client_id=client_id), MQTT_5))
        self.loop.run_turn()
        transport.writes.clear()  # the CONNACK
        self.loop.advance(0.001)  # (the CONNACK was written at the read's end, at that time)
        return protocol, transport

    def turn(self) -> None:
        """Run this turn's callbacks; the next read is a millisecond later (it writes at its
        end again)."""
        self.loop.run_turn()
        self.loop.advance(0.001)

    def soon(self) -> int:
        """Callbacks scheduled for this turn (``call_soon``), not timers."""
        return sum(1 for h in self.loop.handles if h.when <= self.loop.now and not h.cancelled)


def _publish(packet_id: int) -> bytes:
    return encode(Publish("t/1", b"m%d" % packet_id, qos=1, packet_id=packet_id), MQTT_5)


def _subscribed(node: _Node) -> tuple[MqttClientProtocol, _Transport]:
    sub, sub_out = node.client("sub")
    sub.data_received(encode(Subscribe(1, [SubscriptionRequest("t/1", qos=1)]), MQTT_5))
    node.turn()
    sub_out.writes.clear()  # the SUBACK
    return sub, sub_out


def test_a_publish_is_written_to_its_subscriber_and_acknowledged_at_the_reads_end() -> None:
    node = _Node()
    _, sub_out = _subscribed(node)
    pub, pub_out = node.client("pub")
    pub.data_received(_publish(7))
    assert node.soon() == 0  # nothing scheduled: written before the read returned
    [[delivered]] = sub_out.packets()
    assert isinstance(delivered, Publish) and delivered.payload == b"m7"
    assert pub_out.packets() == [[Puback(7)]]


def test_reads_of_one_loop_time_write_a_subscriber_twice_at_most() -> None:
    node = _Node()
    _, sub_out = _subscribed(node)
    publishers = [node.client(f"pub-{n}") for n in range(3)]
    for n, (pub, _) in enumerate(publishers):
        pub.data_received(_publish(n + 1))
    # the first read wrote to the subscriber at once; the second found it written at this loop
    # time and left it to the turn's flush, which the third then left everything to
    assert node.soon() == 1
    assert [len(write) for write in sub_out.packets()] == [1]
    assert publishers[0][1].packets() == [[Puback(1)]]
    assert publishers[1][1].packets() == [[Puback(2)]]  # (not written at this time before)
    assert publishers[2][1].packets() == []  # waits for the turn's flush
    node.loop.run_turn()
    [both] = sub_out.packets()  # the second and third messages: one write
    assert [cast(Publish, packet).payload for packet in both] == [b"m2", b"m3"]
    assert publishers[2][1].packets() == [[Puback(3)]]
    assert node.soon() == 0


def test_a_read_at_a_later_loop_time_writes_at_once_again() -> None:
    node = _Node()
    _, sub_out = _subscribed(node)
    pub, pub_out = node.client("pub")
    pub.data_received(_publish(1))
    node.loop.advance(0.001)  # libuv's clock: whole milliseconds
    pub.data_received(_publish(2))
    assert node.soon() == 0
    assert len(sub_out.packets()) == 2
    assert pub_out.packets() == [[Puback(1)], [Puback(2)]]


def test_a_flush_of_several_packets_keeps_their_order_and_the_next_flush_starts_afresh() -> None:
    node = _Node()
    _, sub_out = _subscribed(node)
    pub, pub_out = node.client("pub")
    pub.data_received(_publish(1))  # written at the read's end: the subscriber's loop time
    for packet_id in (2, 3, 4):  # left to the turn's flush: one write of the three
        pub.data_received(_publish(packet_id))
    node.loop.run_turn()
    first, rest = sub_out.packets()
    assert [cast(Publish, packet).payload for packet in first] == [b"m1"]
    assert [cast(Publish, packet).payload for packet in rest] == [b"m2", b"m3", b"m4"]
    node.loop.advance(0.001)
    pub.data_received(_publish(5))  # one packet again, alone in its write
    [[alone]] = sub_out.packets()
    assert cast(Publish, alone).payload == b"m5"
    assert pub_out.packets() == [[Puback(1)], [Puback(2), Puback(3), Puback(4)], [Puback(5)]]
