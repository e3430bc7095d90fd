"""PROXY protocol v1/v2 listeners: the real client address, required headers, TLS behind it."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.certificates import TestCertificateAuthority
from tests.support.http_probe import listening_broker, wait_port
from xmq.codec.packets import MQTT_5, Connack, Connect
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode
from xmq.net.proxy_header import encode_v1, encode_v2

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Path]]:
    directory = tmp_path_factory.mktemp("proxy")
    ca = TestCertificateAuthority(directory)
    server = ca.issue("xmq server", "server")
    config = (
        "auth: {allow_anonymous: false}\n"
        "listeners:\n"
        "  - {name: mqtt, protocol: tcp, proxy_protocol: required}\n"
        "  - {name: optional, protocol: tcp, host: 127.0.0.1, port: 0, proxy_protocol: optional}\n"
        "  - name: tls\n"
        "    protocol: tls\n"
        "    host: 127.0.0.1\n"
        "    port: 0\n"
        "    proxy_protocol: required\n"
        f"    tls: {server.tls_yaml()}\n"
    )
    with listening_broker(config, "tls") as process:
        yield process, ca.ca_file


def _connect_packet(client_id: str, username: str | None) -> bytes:
    return encode(
        Connect(
            protocol_name="MQTT",
            protocol_version=MQTT_5,
            clean_start=True,
            keep_alive=30,
            client_id=client_id,
            username=username,
        ),
        MQTT_5,
    )


def _connack(sock: socket.socket | ssl.SSLSocket) -> Connack | None:
    reader = PacketReader(protocol_version=MQTT_5)
    while True:
        try:
            data = sock.recv(4096)
        except ConnectionResetError:  # closed with our bytes unread
            return None
        if not data:
            return None
        packets = reader.feed(data)
        if packets:
            packet = packets[0]
            assert isinstance(packet, Connack)
            return packet


def _wait_log(broker: BrokerProcess, text: str) -> None:
    deadline = time.monotonic() + 5
    while text not in broker.log():
        assert time.monotonic() < deadline, f"{text!r} not in log:\n{broker.log()}"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("encoder", "address"),
    [(encode_v1, ("203.0.113.7", 5555)), (encode_v2, ("198.51.100.9", 61000))],
    ids=["v1", "v2"],
)
def test_real_client_address_is_used(
    proxied: tuple[BrokerProcess, Path], encoder: object, address: tuple[str, int], uid: str
) -> None:
    broker, _ca = proxied
    assert callable(encoder)
    header = encoder(address, ("127.0.0.1", broker.port))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        # header and CONNECT in one segment, as a load balancer forwards them
        sock.sendall(header + _connect_packet(f"{uid}-ok", "alice"))
        ack = _connack(sock)
        assert ack is not None and ack.reason_code == 0
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        sock.sendall(header + _connect_packet(f"{uid}-anon", None))
        ack = _connack(sock)
        assert ack is not None and ack.reason_code == 0x86
    _wait_log(broker, f"refused {address[0]}:{address[1]} ({uid}-anon)")


def test_required_header_missing_closes(proxied: tuple[BrokerProcess, Path], uid: str) -> None:
    broker, _ca = proxied
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        sock.sendall(_connect_packet(f"{uid}-direct", "alice"))
        assert _connack(sock) is None  # closed without an answer
    _wait_log(broker, "connection without the required PROXY header")


def test_optional_header(proxied: tuple[BrokerProcess, Path], uid: str) -> None:
    broker, _ca = proxied
    port = wait_port(broker, "optional")
    header = encode_v1(("192.0.2.44", 1234), ("127.0.0.1", port))
    for prefix, client in ((b"", "direct"), (header, "proxied")):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(prefix + _connect_packet(f"{uid}-{client}", None))
            ack = _connack(sock)
            assert ack is not None and ack.reason_code == 0x86
    _wait_log(broker, "refused 127.0.0.1:")
    _wait_log(broker, f"refused 192.0.2.44:1234 ({uid}-proxied)")


def test_tls_behind_the_header(proxied: tuple[BrokerProcess, Path], uid: str) -> None:
    broker, ca_file = proxied
    port = wait_port(broker, "tls")
    context = ssl.create_default_context(cafile=str(ca_file))
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    raw.sendall(encode_v2(("203.0.113.80", 4444), ("127.0.0.1", port)))
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(_connect_packet(f"{uid}-tls", None))
        ack = _connack(tls)
        assert ack is not None and ack.reason_code == 0x86
    _wait_log(broker, f"refused 203.0.113.80:4444 ({uid}-tls)")


def test_a_failed_handshake_behind_the_header_names_the_real_client(
    proxied: tuple[BrokerProcess, Path], uid: str
) -> None:
    """The TLS handshake failure's log line names the client address from the PROXY header
    (the listener accepts, reads the header, then starts TLS)."""
    broker, _ca = proxied
    port = wait_port(broker, "tls")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(encode_v2(("203.0.113.81", 4445), ("127.0.0.1", port)))
        sock.sendall(_connect_packet(f"{uid}-plain", None))  # plain MQTT where TLS is due
        assert _connack(sock) is None
    _wait_log(broker, "listener tls: TLS handshake with 203.0.113.81:4445 failed")
