"""An in-memory ClientLink for unit tests of the core (the socket side is tested for real in
tests/integration)."""

from __future__ import annotations

import asyncio

from xmq.codec.packets import MQTT_5, Connect, Packet
from xmq.codec.reader import PacketReader
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.client_link import ClientLink
from xmq.core.connection import ClientConnection


class SinkLink(ClientLink):
    """Keeps what the core writes; decodes it on demand (``congested`` is the base's field)."""

    __slots__ = ("closed", "out", "peer", "reader")

    peer: str  # (a plain attribute here, the base's read-only property overridden)

    def __init__(self) -> None:
        self.out = bytearray()
        self.peer = "127.0.0.1:1"
        self.congested = False
        self.closed = False
        self.reader = PacketReader(protocol_version=MQTT_5)

    def write(self, data: bytes) -> None:
        self.out += data

    def write_publish(self, head: bytes, packet_id: int, tail: bytes) -> None:
        self.out += head
        if packet_id:
            self.out += packet_id.to_bytes(2, "big")
        self.out += tail

    def writable(self) -> bool:
        return not self.congested

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def login_accepted(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def packets(self) -> list[Packet]:
        """Decode and clear what was written so far."""
        data = bytes(self.out)
        self.out.clear()
        return self.reader.feed(data)


async def connect_client(
    broker: Broker, client_id: str, connect: Connect | None = None, drain: bool = True
) -> tuple[ClientConnection, SinkLink]:
    """A connected ClientConnection over a SinkLink (with ``drain``, what the broker wrote
    on connecting — the CONNACK and any resumed messages — is consumed)."""
    link = SinkLink()
    conn = ClientConnection(broker, link, AnonymousAuthenticator(), AllowAll())
    conn.handle(connect or Connect(client_id=client_id))
    for _ in range(5):
        await asyncio.sleep(0)
    if drain:
        link.packets()
    return conn, link
