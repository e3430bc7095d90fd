"""MQTT over WebSocket and secure WebSocket with paho's websocket transport."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.http_probe import metric, wait_port, websocket_broker
from tests.support.paho_client import PahoClient

pytestmark = pytest.mark.integration

StartBroker = Callable[..., BrokerProcess]


@pytest.fixture(scope="module")
def ws_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Path]]:
    directory = tmp_path_factory.mktemp("wss")
    with websocket_broker(directory) as started:
        yield started


def _ws_client(port: int, client_id: str, path: str, ca_file: Path | None = None) -> PahoClient:
    client = PahoClient(port, client_id, transport="websockets")
    client.client.ws_set_options(path=path)
    if ca_file is not None:
        client.client.tls_set(ca_certs=str(ca_file))
    return client


def test_websocket_and_tcp_clients_talk(ws_broker: tuple[BrokerProcess, Path], uid: str) -> None:
    broker, _ca = ws_broker
    ws = _ws_client(wait_port(broker, "ws"), f"{uid}-ws", "/mqtt")
    tcp = PahoClient(broker.port, f"{uid}-tcp")
    try:
        assert ws.connect().reason == 0
        assert tcp.connect().reason == 0
        assert ws.subscribe(f"{uid}/#", qos=1) == [1]
        assert tcp.subscribe(f"{uid}/from-ws", qos=1) == [1]
        big = bytes(range(256)) * 400  # > one WebSocket frame header size class
        assert tcp.publish(f"{uid}/to-ws", big, qos=1) == 0
        assert ws.expect(1)[0].payload == big
        for n in range(20):
            assert ws.publish(f"{uid}/from-ws", f"{n}".encode(), qos=1) == 0
        assert [m.payload for m in tcp.expect(20)] == [f"{n}".encode() for n in range(20)]
        ws.disconnect()
    finally:
        ws.close()
        tcp.close()


def test_secure_websocket(ws_broker: tuple[BrokerProcess, Path], uid: str) -> None:
    broker, ca_file = ws_broker
    client = _ws_client(wait_port(broker, "wss"), f"{uid}-wss", "/secure", ca_file)
    try:
        assert client.connect().reason == 0
        assert client.subscribe(f"{uid}/s", qos=1) == [1]
        assert client.publish(f"{uid}/s", b"wss", qos=1) == 0
        assert client.expect(1)[0].payload == b"wss"
        assert (
            metric(wait_port(broker, "metrics"), "xmq_listener_connections", 'listener="wss"') == 1
        )
    finally:
        client.close()


def _upgrade(port: int, path: str, protocol: str = "mqtt") -> bytes:
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request.encode())
        return sock.recv(4096)


@pytest.mark.spec("5:MQTT-6.0.0-4", "3:MQTT-6.0.0-4")
@pytest.mark.parametrize(
    ("path", "protocol", "status"),
    [("/mqtt", "mqtt", b"101"), ("/other", "mqtt", b"404"), ("/mqtt", "chat", b"400")],
    ids=["accepted", "wrong-path", "wrong-subprotocol"],
)
def test_upgrade_rules(
    ws_broker: tuple[BrokerProcess, Path], path: str, protocol: str, status: bytes
) -> None:
    broker, _ca = ws_broker
    answer = _upgrade(wait_port(broker, "ws"), path, protocol)
    assert answer.split(b" ")[1] == status, answer
    if status == b"101":
        assert b"sec-websocket-protocol: mqtt" in answer.lower()
