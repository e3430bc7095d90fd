"""Seeded, bounded fuzz over the WebSocket, secure WebSocket, TLS and PROXY listeners.

Every connection sends a mutated stream in reads cut anywhere and is then dropped; afterwards
the broker log holds no traceback (nothing escaped a protocol's ``data_received``) and a
well-behaved client on every listener still connects and gets its messages.
"""

from __future__ import annotations

import random
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.certificates import TestCertificateAuthority
from tests.support.http_probe import listening_broker, wait_port
from tests.support.paho_client import PahoClient
from tests.support.ws_frames import (
    OP_BINARY,
    OP_CLOSE,
    binary,
    fuzzed_stream,
    random_splits,
    read_upgrade_answer,
    server_frames,
    upgrade_request,
)
from xmq.codec.packets import MQTT_5, Connack, Connect, Packet, Pingresp, Puback
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode
from xmq.net.proxy_header import encode_v1, encode_v2

pytestmark = pytest.mark.integration

_CONNECT = encode(Connect(protocol_version=MQTT_5, client_id="", clean_start=True), MQTT_5)
_PUBLISH = b"\x32\x0b\x00\x03a/b\x00\x07\x00hi!"  # QoS 1, MQTT 5
_EMPTY_RETAINED = b"\x31\x04\x00\x01t\x00"  # a retained clear: PUBLISH retain, no payload
_PINGREQ = b"\xc0\x00"
_MQTT = _CONNECT + _PUBLISH + _EMPTY_RETAINED + _PINGREQ


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Path]]:
    directory = tmp_path_factory.mktemp("fuzz")
    ca = TestCertificateAuthority(directory)
    server = ca.issue("xmq server", "server")
    tls = server.tls_yaml()
    config = (
        "listeners:\n"
        "  - {name: mqtt, protocol: tcp}\n"
        "  - {name: ws, protocol: ws, host: 127.0.0.1, port: 0, ws_path: /mqtt}\n"
        f"  - {{name: wss, protocol: wss, host: 127.0.0.1, port: 0, ws_path: /mqtt, tls: {tls}}}\n"
        f"  - {{name: tls, protocol: tls, host: 127.0.0.1, port: 0, tls: {tls}}}\n"
        "  - {name: proxy, protocol: tcp, host: 127.0.0.1, port: 0, proxy_protocol: required}\n"
        "  - {name: proxy-optional, protocol: tcp, host: 127.0.0.1, port: 0,"
        " proxy_protocol: optional}\n"
    )
    with listening_broker(config, "proxy-optional") as process:
        yield process, ca.ca_file


def _client_context(ca_file: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_file))
    context.check_hostname = False
    return context


def _send(sock: socket.socket, chunks: list[bytes]) -> None:
    try:
        for chunk in chunks:
            sock.sendall(chunk)
        sock.settimeout(0.05)
        while sock.recv(65536):  # read what comes back; the server may close first
            pass
    except (OSError, ssl.SSLError):
        pass


def _open(port: int, context: ssl.SSLContext | None) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # one segment per chunk
    if context is not None:
        return context.wrap_socket(sock)
    return sock


def _well_behaved(broker: BrokerProcess, name: str, client_id: str, ca_file: Path) -> PahoClient:
    port = wait_port(broker, name)
    if name == "mqtt":
        return PahoClient(port, client_id)
    client = PahoClient(port, client_id, transport="websockets")
    client.client.ws_set_options(path="/mqtt")
    if name == "wss":
        client.client.tls_set(ca_certs=str(ca_file))
        client.client.tls_insecure_set(True)
    return client


def _assert_healthy(broker: BrokerProcess, ca_file: Path, uid: str) -> None:
    log = broker.log()
    assert "Traceback" not in log and "Fatal error" not in log, log[-3000:]
    assert broker.proc.poll() is None
    tcp = PahoClient(broker.port, f"{uid}-sub")
    try:
        assert tcp.connect().reason == 0
        assert tcp.subscribe(f"{uid}/#", qos=1) == [1]
        for name in ("mqtt", "ws", "wss"):
            client = _well_behaved(broker, name, f"{uid}-{name}", ca_file)
            try:
                assert client.connect().reason == 0, name
                assert client.publish(f"{uid}/{name}", name.encode(), qos=1) == 0
                assert tcp.expect(1)[0].payload == name.encode()
            finally:
                client.close()
    finally:
        tcp.close()


def _websocket_fuzz(port: int, context: ssl.SSLContext | None, seed: int, count: int) -> None:
    rng = random.Random(seed)
    for _ in range(count):
        stream = fuzzed_stream(rng, _MQTT)
        with _open(port, context) as sock:
            if rng.random() < 0.5:  # upgraded first: the frames come in reads of their own
                sock.sendall(upgrade_request())
                read_upgrade_answer(sock)
            else:
                stream = upgrade_request() + stream
            _send(sock, random_splits(rng, stream, most=4))


def test_websocket_frame_fuzz(fuzzed: tuple[BrokerProcess, Path], uid: str) -> None:
    broker, ca_file = fuzzed
    _websocket_fuzz(wait_port(broker, "ws"), None, 1616, 300)
    _assert_healthy(broker, ca_file, uid)


def test_secure_websocket_frame_fuzz(fuzzed: tuple[BrokerProcess, Path], uid: str) -> None:
    broker, ca_file = fuzzed
    _websocket_fuzz(wait_port(broker, "wss"), _client_context(ca_file), 1617, 80)
    _assert_healthy(broker, ca_file, uid)


def _mutated_mqtt(rng: random.Random) -> bytes:
    data = bytearray(_MQTT)
    for _ in range(rng.randrange(4)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data[: rng.randrange(1, len(data) + 1)])


def test_tcp_fuzz(fuzzed: tuple[BrokerProcess, Path], uid: str) -> None:
    """Mutated MQTT straight over TCP, cut anywhere (the codec's own fuzz, on a socket)."""
    broker, ca_file = fuzzed
    rng = random.Random(1620)
    for _ in range(200):
        with _open(broker.port, None) as sock:
            _send(sock, random_splits(rng, _mutated_mqtt(rng)))
    _assert_healthy(broker, ca_file, uid)


def test_tls_fuzz(fuzzed: tuple[BrokerProcess, Path], uid: str) -> None:
    """Mutated MQTT inside TLS, and garbage or a cut-off handshake in place of TLS."""
    broker, ca_file = fuzzed
    port = wait_port(broker, "tls")
    context = _client_context(ca_file)
    rng = random.Random(1618)
    for n in range(80):
        if n % 2:
            with _open(port, context) as sock:
                _send(sock, random_splits(rng, _mutated_mqtt(rng)))
        else:
            garbage = b"\x16\x03\x01" + rng.randbytes(rng.randrange(0, 300))
            with _open(port, None) as sock:
                _send(sock, random_splits(rng, garbage))
    _assert_healthy(broker, ca_file, uid)


def _mutated_header(rng: random.Random) -> bytes:
    header = rng.choice(
        [
            encode_v1(("203.0.113.7", 5555), ("10.0.0.1", 1884)),
            encode_v2(("198.51.100.9", 61000), ("10.0.0.1", 1884)),
            encode_v2(("2001:db8::9", 1), ("2001:db8::1", 1884)),
            b"PROXY UNKNOWN\r\n",
        ]
    )
    data = bytearray(header)
    kind = rng.randrange(4)
    if kind == 0:
        data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == 1:
        del data[rng.randrange(len(data)) :]
    elif kind == 2:
        data[12:16] = rng.randbytes(4)  # v2: version, command, family, length
    return bytes(data) + _mutated_mqtt(rng)


def test_proxy_header_fuzz(fuzzed: tuple[BrokerProcess, Path], uid: str) -> None:
    broker, ca_file = fuzzed
    rng = random.Random(1619)
    for n in range(200):
        port = wait_port(broker, "proxy" if n % 2 else "proxy-optional")
        with _open(port, None) as sock:
            _send(sock, random_splits(rng, _mutated_header(rng)))
    _assert_healthy(broker, ca_file, uid)


def _ws_session(port: int, context: ssl.SSLContext | None, stream: bytes) -> list[Packet]:
    """Upgrade and CONNECT in one write, then ``stream``; the MQTT packets up to a PINGRESP."""
    with _open(port, context) as sock:
        sock.sendall(upgrade_request() + binary(_CONNECT))
        status, received = read_upgrade_answer(sock)
        assert status.split(b" ")[1] == b"101", status
        sock.sendall(stream)
        sock.settimeout(10)
        while True:
            frames, _ = server_frames(received)
            data = b"".join(payload for opcode, payload in frames if opcode == OP_BINARY)
            packets = PacketReader(protocol_version=MQTT_5).feed(data)
            closed = any(opcode == OP_CLOSE for opcode, _ in frames)
            if closed or any(isinstance(packet, Pingresp) for packet in packets):
                return packets
            chunk = sock.recv(65536)
            if not chunk:
                return packets
            received += chunk


@pytest.mark.parametrize("name", ["ws", "wss"])
def test_upgrade_with_connect_then_empty_messages(
    fuzzed: tuple[BrokerProcess, Path], name: str
) -> None:
    """CONNECT in the upgrade's write; a retained clear sent as MQTT.js does (header, then an
    empty message for the empty payload) is acknowledged; the connection stays up."""
    broker, ca_file = fuzzed
    context = _client_context(ca_file) if name == "wss" else None
    clear = b"\x33\x06\x00\x01t\x00\x05\x00"  # QoS 1 retained PUBLISH "t" id 5, no payload
    stream = binary(clear) + binary(b"") + binary(b"") + binary(_PINGREQ)
    packets = _ws_session(wait_port(broker, name), context, stream)
    assert [type(packet).__name__ for packet in packets] == ["Connack", "Puback", "Pingresp"]
    connack, puback = packets[0], packets[1]
    assert isinstance(connack, Connack) and connack.reason_code == 0
    assert isinstance(puback, Puback) and puback.packet_id == 5
    assert "Traceback" not in broker.log()
