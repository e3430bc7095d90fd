"""Reading the PROXY header: half-sent headers cost no CPU and die at the connect deadline;
headers split byte by byte still work (plain and in front of TLS)."""

from __future__ import annotations

import os
import selectors
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.certificates import TestCertificateAuthority
from tests.support.http_probe import listening_broker, wait_port
from tests.support.raw_client import RawClient
from xmq.codec.packets import MQTT_5, Connack, Connect
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode
from xmq.net.proxy_header import encode_v1, encode_v2

pytestmark = pytest.mark.integration

DEADLINE_S = 8.0
HALF_OPEN = 1000
QUIET_CPU_S = 0.1
"""CPU seconds the broker may use in half a second with 1,000 half-sent headers open."""


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Path]]:
    directory = tmp_path_factory.mktemp("proxy-reading")
    ca = TestCertificateAuthority(directory)
    server = ca.issue("xmq server", "server")
    config = (
        "auth: {allow_anonymous: false}\n"
        "listeners:\n"
        "  - {name: mqtt, protocol: tcp}\n"
        "  - {name: proxy, protocol: tcp, host: 127.0.0.1, port: 0,"
        f" proxy_protocol: required, connect_timeout_s: {DEADLINE_S}}}\n"
        "  - name: proxy-tls\n"
        "    protocol: tls\n"
        "    host: 127.0.0.1\n"
        "    port: 0\n"
        "    proxy_protocol: required\n"
        f"    tls: {server.tls_yaml()}\n"
    )
    with listening_broker(config, "proxy-tls") as process:
        yield process, ca.ca_file


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _connect(client_id: str) -> bytes:
    return encode(Connect(protocol_version=MQTT_5, client_id=client_id, clean_start=True), MQTT_5)


def _connack(sock: socket.socket | ssl.SSLSocket) -> Connack | None:
    reader = PacketReader(protocol_version=MQTT_5)
    while True:
        data = sock.recv(4096)
        if not data:
            return None
        packets = reader.feed(data)
        if packets:
            assert isinstance(packets[0], Connack)
            return packets[0]


def _wait_log(broker: BrokerProcess, text: str) -> None:
    deadline = time.monotonic() + 10
    while text not in broker.log():
        assert time.monotonic() < deadline, f"{text!r} not in log:\n{broker.log()[-3000:]}"
        time.sleep(0.05)


def _all_closed_by_server(sockets: list[socket.socket], timeout: float) -> bool:
    """Wait until the broker has closed every socket (EOF or reset)."""
    selector = selectors.DefaultSelector()
    for sock in sockets:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    open_ = len(sockets)
    deadline = time.monotonic() + timeout
    try:
        while open_ and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.5):
                closing = key.fileobj
                assert isinstance(closing, socket.socket)
                try:
                    data = closing.recv(1)
                except ConnectionResetError:
                    data = b""
                except BlockingIOError:
                    continue
                assert not data
                selector.unregister(closing)
                open_ -= 1
        return open_ == 0
    finally:
        selector.close()


def test_half_sent_headers_cost_nothing_and_die_at_the_deadline(
    proxied: tuple[BrokerProcess, Path], uid: str
) -> None:
    broker, _ca = proxied
    port = wait_port(broker, "proxy")
    halves = [
        encode_v1(("203.0.113.7", 5555), ("127.0.0.1", port))[:20],
        encode_v2(("198.51.100.9", 61000), ("127.0.0.1", port))[:20],
        b"PRO",
        b"\r\n\r\n",
    ]
    sockets: list[socket.socket] = []
    try:
        opened = time.monotonic()
        for n in range(HALF_OPEN):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(halves[n % len(halves)])
            sockets.append(sock)
        # a well-behaved client on another listener meanwhile
        started = time.monotonic()
        raw = RawClient(broker.port)
        try:
            raw.send_packet(Connect(protocol_version=MQTT_5, client_id=f"{uid}-ok"))
            ack = raw.read_packet()
            assert isinstance(ack, Connack) and ack.reason_code == 0x86  # answered (anonymous)
        finally:
            raw.close()
        assert time.monotonic() - started < 1.0
        # Once the broker has accepted and read them, the half headers cost no CPU: a quiet
        # half second must come (polling them, the old reader used a core all along).
        windows: list[float] = []
        while len(windows) < 6 and (not windows or min(windows) >= QUIET_CPU_S):
            before = _cpu_seconds(broker.proc.pid)
            time.sleep(0.5)
            windows.append(_cpu_seconds(broker.proc.pid) - before)
        assert time.monotonic() - opened < DEADLINE_S - 1, "measured after the deadline"
        assert min(windows) < QUIET_CPU_S, f"CPU seconds per half second: {windows}"
        assert _all_closed_by_server(sockets, DEADLINE_S + 15)
        assert time.monotonic() - opened >= DEADLINE_S  # not before the deadline
    finally:
        for sock in sockets:
            sock.close()
    _wait_log(broker, "refused connection: ")


@pytest.mark.parametrize("encoder", [encode_v1, encode_v2], ids=["v1", "v2"])
def test_headers_split_byte_by_byte(
    proxied: tuple[BrokerProcess, Path], uid: str, encoder: object
) -> None:
    broker, ca_file = proxied
    assert callable(encoder)
    port = wait_port(broker, "proxy")
    header = encoder(("203.0.113.61", 6161), ("127.0.0.1", port))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for byte in header:
            sock.sendall(bytes((byte,)))
            time.sleep(0.002)  # a segment per byte
        sock.sendall(_connect(f"{uid}-bytes"))
        ack = _connack(sock)
        assert ack is not None and ack.reason_code == 0x86
    _wait_log(broker, f"refused 203.0.113.61:6161 ({uid}-bytes)")
    tls_port = wait_port(broker, "proxy-tls")
    header = encoder(("203.0.113.62", 6262), ("127.0.0.1", tls_port))
    raw = socket.create_connection(("127.0.0.1", tls_port), timeout=5)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for byte in header:
        raw.sendall(bytes((byte,)))
        time.sleep(0.002)
    context = ssl.create_default_context(cafile=str(ca_file))
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(_connect(f"{uid}-tls"))
        ack = _connack(tls)
        assert ack is not None and ack.reason_code == 0x86
    _wait_log(broker, f"refused 203.0.113.62:6262 ({uid}-tls)")
