"""MQTT over WebSocket (section 6 of both specifications) on a raw socket: frames by hand."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.support.http_probe import listening_broker, wait_port
from tests.support.ws_frames import (
    OP_BINARY,
    OP_CLOSE,
    OP_TEXT,
    binary,
    frame,
    read_upgrade_answer,
    server_frames,
    upgrade_request,
)
from xmq.codec.packets import Connack, Connect, Packet, Pingreq, Pingresp, Publish
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ws_port() -> Iterator[int]:
    config = (
        "listeners:\n"
        "  - {name: mqtt, protocol: tcp}\n"
        "  - {name: ws, protocol: ws, host: 127.0.0.1, port: 0, ws_path: /mqtt}\n"
    )
    with listening_broker(config, "ws") as process:
        yield wait_port(process, "ws")


def _session(port: int, stream: list[bytes], version: int) -> tuple[list[Packet], bool]:
    """Upgrade, send each item of ``stream`` in a write of its own: the MQTT packets received
    (binary frames, up to a PINGRESP) and whether the broker closed the WebSocket or the
    connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(upgrade_request())
        status, received = read_upgrade_answer(sock)
        assert status.split(b" ")[1] == b"101", status
        for data in stream:
            sock.sendall(data)
        reader = PacketReader(protocol_version=version)
        packets: list[Packet] = []
        closed = False
        sock.settimeout(10)
        while True:
            frames, received = server_frames(received)
            for opcode, payload in frames:
                if opcode == OP_BINARY:
                    packets.extend(reader.feed(payload))
                closed = closed or opcode == OP_CLOSE
            if closed or any(isinstance(p, Pingresp) for p in packets):
                break
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                closed = True
            received += chunk
        return packets, closed


@pytest.mark.spec("5:MQTT-6.0.0-2", "3:MQTT-6.0.0-2", "5:MQTT-4.2.0-1", "3:MQTT-7.1.1-1")
@pytest.mark.parametrize("version", [5, 4], ids=["mqtt5", "mqtt311"])
def test_packets_need_not_align_with_frames(ws_port: int, uid: str, version: int) -> None:
    connect = encode(Connect(protocol_version=version, client_id=uid, keep_alive=60), version)
    publish = encode(Publish(f"{uid}/t", b"x", qos=1, packet_id=7), version)
    ping = encode(Pingreq(), version)
    stream = [
        binary(connect[:3]),  # CONNECT over three frames
        binary(connect[3:-1]),
        binary(connect[-1:] + publish[:2]),  # its last byte with the start of a PUBLISH
        binary(publish[2:] + ping),  # the rest of it and a PINGREQ in one frame
    ]
    packets, closed = _session(ws_port, stream, version)
    assert [type(p).__name__ for p in packets] == ["Connack", "Puback", "Pingresp"]
    assert isinstance(packets[0], Connack) and packets[0].reason_code == 0
    assert not closed


@pytest.mark.spec("5:MQTT-6.0.0-1", "3:MQTT-6.0.0-1")
@pytest.mark.parametrize("version", [5, 4], ids=["mqtt5", "mqtt311"])
def test_a_text_frame_closes_the_connection(ws_port: int, uid: str, version: int) -> None:
    connect = encode(Connect(protocol_version=version, client_id=uid, keep_alive=60), version)
    ping = encode(Pingreq(), version)
    packets, closed = _session(
        ws_port, [binary(connect), frame(OP_TEXT, b"hello"), binary(ping)], version
    )
    assert closed
    assert [type(p).__name__ for p in packets] == ["Connack"]  # the PINGREQ is not answered
