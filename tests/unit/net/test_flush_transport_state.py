"""A flush writes without asking the transport ``is_closing()`` each time: the protocol knows
when its transport stops taking bytes (the client's EOF, its own close and abort), and a write
refused because uvloop closed the transport on an error meanwhile is dropped only when the
transport says it is closing. The packet id of a PUBLISH comes from the codec's ``u16`` table,
and a flush of several packets writes them once, in order."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

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
    """Records each ``write``; ``closing`` is what ``is_closing`` says, ``refuse`` makes a
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

    def packets(self) -> list[Packet]:
        """The packets of every write, taken."""
        taken, self.writes = self.writes, []
        return PacketReader(protocol_version=MQTT_5).feed(b"".join(taken))


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
        self.turn()
        transport.writes.clear()  # the CONNACK
        return protocol, transport

    def subscriber(self) -> tuple[MqttClientProtocol, _Transport]:
        sub, sub_out = self.client("sub")
        sub.data_received(encode(Subscribe(1, [SubscriptionRequest("t/1", qos=1)]), MQTT_5))
        self.turn()
        sub_out.writes.clear()  # the SUBACK
        return sub, sub_out

    def turn(self) -> None:
        self.loop.run_turn()
        self.loop.advance(0.001)  # the next read writes at its end again


def _publish(packet_id: int) -> bytes:
    return encode(Publish("t/1", b"m%d" % packet_id, qos=1, packet_id=packet_id), MQTT_5)


def test_a_flush_does_not_ask_the_transport_whether_it_is_closing() -> None:
    node = _Node()
    _, sub_out = node.subscriber()
    pub, pub_out = node.client("pub")
    pub.data_received(_publish(1))
    node.turn()
    assert [type(packet) for packet in sub_out.packets()] == [Publish]
    assert pub_out.packets() == [Puback(1)]
    assert sub_out.asked_closing == 0
    assert pub_out.asked_closing == 0


def test_nothing_is_written_after_the_client_s_eof() -> None:
    """The transport closes itself once ``eof_received`` returns: the subscriber's PUBLISH
    stays unwritten (in flight, for its session), though ``is_closing`` would say False."""
    node = _Node()
    sub, sub_out = node.subscriber()
    assert sub.eof_received() is None
    pub, pub_out = node.client("pub")
    pub.data_received(_publish(1))
    node.turn()
    assert sub_out.writes == []
    assert pub_out.packets() == [Puback(1)]
    session = sub.conn.session
    assert session is not None and len(session.inflight) == 1


def test_a_write_refused_by_a_closing_transport_is_dropped() -> None:
    node = _Node()
    _, sub_out = node.subscriber()
    sub_out.refuse = sub_out.closing = True  # uvloop closed it on an error, not told us yet
    pub, pub_out = node.client("pub")
    pub.data_received(_publish(1))  # no exception out of the publisher's read
    node.turn()
    pub.data_received(_publish(2))  # the next output is marked and dropped the same way
    node.turn()
    assert sub_out.writes == []
    assert sub_out.asked_closing == 2  # asked on each refused write only
    assert pub_out.packets() == [Puback(1), Puback(2)]


def test_a_write_refused_by_a_transport_that_is_not_closing_raises() -> None:
    node = _Node()
    sub, sub_out = node.subscriber()
    sub.write(b"\xd0\x00")
    sub_out.refuse = True
    with pytest.raises(RuntimeError):
        sub.flush()


@pytest.mark.parametrize("packet_id", [1, 0xFF, 0x100, 0x1234, 0xFFFF])
def test_write_publish_writes_the_packet_id_in_two_bytes(packet_id: int) -> None:
    node = _Node()
    sub, sub_out = node.client("sub")
    sub.write_publish(b"\x32\x0a\x00\x03t/1", packet_id, b"\x00abc")
    sub.flush()
    assert sub_out.writes == [b"\x32\x0a\x00\x03t/1" + packet_id.to_bytes(2, "big") + b"\x00abc"]


def test_a_flush_of_several_packets_writes_them_once_in_order() -> None:
    node = _Node()
    sub, sub_out = node.client("sub")
    sub.write(b"\xd0\x00")
    sub.write_publish(b"\x32\x0a\x00\x03t/1", 0x0102, b"\x00abc")
    sub.write(b"\x40\x02\x00\x07")
    sub.flush()
    sub.flush()  # nothing more
    assert sub_out.writes == [b"\xd0\x00\x32\x0a\x00\x03t/1\x01\x02\x00abc\x40\x02\x00\x07"]
    sub.write(b"\xd0\x00")
    sub.flush()
    assert sub_out.writes[1:] == [b"\xd0\x00"]
