"""WebSocketProtocol against a wsproto client: upgrade, framing, ping, close, text refusal."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    Pong,
    Request,
    TextMessage,
)

from xmq.codec.packets import MQTT_5, Connack, Connect
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.settings import CoreSettings
from xmq.net.client_protocol import FlushScheduler, MqttClientProtocol
from xmq.net.websocket_transport import WebSocketProtocol


class SocketSide:
    """The TCP transport under the WebSocket protocol: records bytes, closes on request."""

    def __init__(self) -> None:
        self.sent = bytearray()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 50000) if name == "peername" else default

    def write(self, data: bytes) -> None:
        self.sent += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def take(self) -> bytes:
        data = bytes(self.sent)
        self.sent.clear()
        return data


async def _server() -> tuple[WebSocketProtocol, SocketSide]:
    broker = Broker(CoreSettings())
    inner = MqttClientProtocol(
        broker,
        AnonymousAuthenticator(),
        AllowAll(),
        FlushScheduler(asyncio.get_running_loop()),
        65536,
    )
    protocol = WebSocketProtocol(inner, "/mqtt")
    side = SocketSide()
    protocol.connection_made(cast(asyncio.Transport, side))
    return protocol, side


def _exchange(
    client: WSConnection, server: WebSocketProtocol, side: SocketSide, event: Event
) -> list[Event]:
    server.data_received(client.send(event))
    client.receive_data(side.take())
    return list(client.events())


async def _upgraded() -> tuple[WSConnection, WebSocketProtocol, SocketSide]:
    server, side = await _server()
    client = WSConnection(ConnectionType.CLIENT)
    events = _exchange(client, server, side, Request("127.0.0.1", "/mqtt", subprotocols=["mqtt"]))
    assert isinstance(events[0], AcceptConnection)
    assert events[0].subprotocol == "mqtt"
    return client, server, side


async def test_mqtt_bytes_travel_in_binary_messages() -> None:
    client, server, side = await _upgraded()
    connect = encode(Connect(protocol_version=MQTT_5, client_id="ws", clean_start=True), MQTT_5)
    # a CONNECT split over two WebSocket messages is one byte stream for MQTT
    server.data_received(client.send(BytesMessage(data=connect[:5])))
    server.data_received(client.send(BytesMessage(data=connect[5:])))
    for _ in range(20):
        await asyncio.sleep(0)
        if side.sent:
            break
    client.receive_data(side.take())
    messages = [e for e in client.events() if isinstance(e, BytesMessage)]
    packets = PacketReader(protocol_version=MQTT_5).feed(b"".join(bytes(m.data) for m in messages))
    assert isinstance(packets[0], Connack) and packets[0].reason_code == 0


async def test_ping_is_answered_and_close_is_echoed() -> None:
    client, server, side = await _upgraded()
    assert any(isinstance(e, Pong) for e in _exchange(client, server, side, Ping(b"hi")))
    events = _exchange(client, server, side, CloseConnection(code=1000))
    assert any(isinstance(e, CloseConnection) for e in events)
    assert side.closed


async def test_text_messages_are_refused() -> None:
    client, server, side = await _upgraded()
    events = _exchange(client, server, side, TextMessage("hello"))
    closes = [e for e in events if isinstance(e, CloseConnection)]
    assert closes and closes[0].code == 1003
    assert side.closed


@pytest.mark.parametrize(
    ("path", "subprotocols", "status"),
    [("/other", ["mqtt"], b"404"), ("/mqtt", ["chat"], b"400")],
    ids=["wrong-path", "wrong-subprotocol"],
)
async def test_bad_upgrades_are_rejected(path: str, subprotocols: list[str], status: bytes) -> None:
    server, side = await _server()
    client = WSConnection(ConnectionType.CLIENT)
    server.data_received(client.send(Request("127.0.0.1", path, subprotocols=subprotocols)))
    assert side.take().split(b" ")[1] == status
    assert side.closed
