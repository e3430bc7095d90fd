"""WebSocketProtocol against a wsproto client: upgrade, framing, ping, close, text refusal."""

from __future__ import annotations

import asyncio
import random
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

from tests.support.ws_frames import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONTINUATION,
    OP_PING,
    OP_TEXT,
    binary,
    close_code,
    frame,
    fuzzed_stream,
    random_splits,
    server_frames,
    upgrade_request,
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


# -- raw frames: empty messages, several frames in one read, bytes that came with the upgrade


def _answer_frames(side: SocketSide) -> list[tuple[int, bytes]]:
    """The frames the server sent (after its HTTP answer, if it is in the bytes)."""
    data = side.take()
    if data.startswith(b"HTTP/1.1"):
        data = data.partition(b"\r\n\r\n")[2]
    frames, _rest = server_frames(data)
    return frames


async def _raw_upgraded() -> tuple[WebSocketProtocol, SocketSide]:
    server, side = await _server()
    server.data_received(upgrade_request())
    assert side.take().startswith(b"HTTP/1.1 101")
    return server, side


async def _settle(side: SocketSide) -> None:
    for _ in range(20):  # the MQTT side writes once per loop tick
        await asyncio.sleep(0)
        if side.sent:
            return


def _mqtt_packets(frames: list[tuple[int, bytes]]) -> list[object]:
    data = b"".join(payload for opcode, payload in frames if opcode == OP_BINARY)
    return list(PacketReader(protocol_version=MQTT_5).feed(data))


_CONNECT = encode(Connect(protocol_version=MQTT_5, client_id="raw", clean_start=True), MQTT_5)
_PINGREQ = b"\xc0\x00"


async def test_upgrade_and_connect_in_one_write_are_both_read() -> None:
    server, side = await _server()
    server.data_received(upgrade_request() + binary(_CONNECT))
    await _settle(side)
    answer = side.take()
    assert answer.startswith(b"HTTP/1.1 101")
    packets = _mqtt_packets(server_frames(answer.partition(b"\r\n\r\n")[2])[0])
    assert isinstance(packets[0], Connack) and packets[0].reason_code == 0


async def test_upgrade_split_anywhere_with_frames_behind_it() -> None:
    stream = upgrade_request() + binary(_CONNECT[:3]) + binary(_CONNECT[3:]) + binary(_PINGREQ)
    for cut in range(1, len(stream), 7):
        server, side = await _server()
        server.data_received(stream[:cut])
        server.data_received(stream[cut:])
        await _settle(side)
        answer = side.take()
        packets = _mqtt_packets(server_frames(answer.partition(b"\r\n\r\n")[2])[0])
        assert [type(p).__name__ for p in packets] == ["Connack", "Pingresp"], cut


async def test_zero_length_messages_are_ignored_once_connected() -> None:
    """MQTT.js writes an empty-payload PUBLISH's payload as its own (empty) message."""
    server, side = await _raw_upgraded()
    server.data_received(binary(_CONNECT))
    await _settle(side)
    assert isinstance(_mqtt_packets(_answer_frames(side))[0], Connack)
    retained_clear = b"\x31\x04\x00\x01t\x00"  # PUBLISH retain, topic "t", no payload (v5)
    server.data_received(binary(retained_clear) + binary(b"") + binary(b"") + binary(_PINGREQ))
    server.data_received(binary(b""))
    await _settle(side)
    assert [type(p).__name__ for p in _mqtt_packets(_answer_frames(side))] == ["Pingresp"]
    assert not side.closed


@pytest.mark.parametrize(
    ("stream", "code"),
    [
        (frame(OP_TEXT, b"hi") + frame(OP_PING, b"p"), 1003),
        (frame(OP_TEXT, b"hi") + frame(OP_TEXT, b"again") + binary(_PINGREQ), 1003),
        (frame(OP_TEXT, b"hi") + frame(0x3, b"reserved opcode"), 1003),
        (frame(OP_BINARY, b"\xc0\x00", mask=None), 1002),
        (frame(0x3, b"x") + frame(OP_PING, b"p"), 1002),
        (frame(OP_BINARY, b"x", rsv=4), 1002),
        (frame(OP_PING, b"x" * 200), 1002),
        (frame(OP_PING, b"p", fin=False), 1002),
        (frame(OP_CONTINUATION, b"x"), 1002),
        (frame(OP_TEXT, b"\xff\xfe"), 1007),
        (frame(OP_CLOSE, b"\x00"), 1002),
        (frame(OP_CLOSE, b"\x03\xe8") + binary(_PINGREQ) + frame(OP_PING, b"p"), 1000),
    ],
    ids=[
        "text-then-ping",
        "text-then-more",
        "text-then-invalid",
        "unmasked",
        "reserved-opcode-then-ping",
        "reserved-bit",
        "long-ping",
        "fragmented-ping",
        "stray-continuation",
        "invalid-utf8-text",
        "one-byte-close",
        "data-after-close",
    ],
)
async def test_frame_sequences_in_one_read_close_cleanly(stream: bytes, code: int) -> None:
    server, side = await _raw_upgraded()
    server.data_received(binary(_CONNECT) + stream)  # one read: nothing may raise
    server.data_received(binary(_PINGREQ) + frame(OP_PING, b"late"))  # after the close too
    await _settle(side)
    frames = _answer_frames(side)
    closes = [payload for opcode, payload in frames if opcode == OP_CLOSE]
    assert len(closes) == 1 and close_code(closes[0]) == code, frames
    assert side.closed


async def test_seeded_frame_fuzz_never_raises() -> None:
    """Frame-level mutations, several frames per read, reads cut anywhere: no exception."""
    rng = random.Random(16)
    publish = b"\x32\x0b\x00\x03a/b\x00\x07\x00hi!"  # QoS 1 PUBLISH, MQTT 5
    outcomes: set[str] = set()
    for _ in range(250):
        server, side = await _server()
        stream = fuzzed_stream(rng, _CONNECT + publish + _PINGREQ)
        if rng.random() < 0.5:
            server.data_received(upgrade_request())
        else:
            stream = upgrade_request() + stream
        for chunk in random_splits(rng, stream):
            server.data_received(chunk)
        await _settle(side)
        outcomes.add("closed" if side.closed else "open")
        server.connection_lost(None)
    assert outcomes == {"closed", "open"}  # both kinds of stream were generated
