"""Everything before the CONNACK is under the connect deadline and bounded in memory: an
abandoned SCRAM exchange is closed at the deadline; during an exchange only AUTH may come,
and an incomplete packet may not grow past a small bound."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml

from tests.support.accounts_file import FAST
from tests.support.broker_process import BrokerProcess
from tests.support.http_probe import metric, wait_port
from tests.support.raw_client import RawClient
from xmq.auth.scram import ScramClient
from xmq.auth.verifiers import derive_scram_credentials, hash_password
from xmq.codec.packets import Auth, Connack, Connect, Publish
from xmq.codec.properties import Properties
from xmq.codec.writer import encode

pytestmark = pytest.mark.integration

DEADLINE_S = 1.5


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    path = tmp_path / "accounts.yaml"
    alice = {
        "password": hash_password("wonderland", FAST),
        "scram": derive_scram_credentials("wonderland", iterations=1000).encode(),
    }
    path.write_text(yaml.safe_dump({"users": {"alice": alice}}))
    process = BrokerProcess(
        f"auth:\n  accounts_file: {path}\n"
        f"listeners:\n  - {{name: mqtt, protocol: tcp, connect_timeout_s: {DEADLINE_S}}}\n"
    )
    try:
        yield process
    finally:
        process.stop()


def scram_started(port: int) -> RawClient:
    """A SCRAM-SHA-256 exchange answered once by the server (0x18 Continue), then abandoned."""
    raw = RawClient(port)
    props = Properties()
    props.authentication_method = "SCRAM-SHA-256"
    props.authentication_data = ScramClient("alice", "wonderland").client_first()
    raw.send_packet(Connect(client_id="", keep_alive=30, properties=props))
    challenge = raw.read_packet()
    assert isinstance(challenge, Auth) and challenge.reason_code == 0x18, challenge
    return raw


def test_abandoned_scram_exchanges_are_closed_at_the_connect_deadline(
    broker: BrokerProcess,
) -> None:
    clients = [scram_started(broker.port) for _ in range(50)]
    started = time.monotonic()
    try:
        for raw in clients:
            assert raw.read_until_closed(timeout=DEADLINE_S + 10) == []
        assert time.monotonic() - started < DEADLINE_S + 5
    finally:
        for raw in clients:
            raw.close()
    timeouts = metric(wait_port(broker, "metrics"), "xmq_connect_timeouts_total", 'listener="mqtt"')
    assert timeouts == 50


def test_only_auth_may_come_during_an_exchange(broker: BrokerProcess) -> None:
    raw = scram_started(broker.port)
    try:
        raw.send_packet(Publish("devices/alice/x", b"too early", qos=0))
        [ack] = raw.read_until_closed()
        assert isinstance(ack, Connack) and ack.reason_code == 0x82  # Protocol error
    finally:
        raw.close()


def _push(sock: socket.socket, chunk: bytes, for_s: float) -> bool:
    """Send ``chunk`` again and again for up to ``for_s`` seconds; whether the broker closed.

    Bounded by time, not bytes: how many bytes fit in the close's linger depends on how fast
    the broker discards them (the compiled build reads 256 MiB in well under its 2 s)."""
    sock.settimeout(5)
    end = time.monotonic() + for_s
    try:
        while time.monotonic() < end:
            sock.sendall(chunk)
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        return True
    return False


def test_an_unauthenticated_client_pushing_packets_does_not_grow_the_broker(
    broker: BrokerProcess,
) -> None:
    process = psutil.Process(broker.proc.pid)
    raw = scram_started(broker.port)
    before = process.memory_info().rss
    try:
        packet = encode(Publish("devices/alice/x", b"p" * 100, qos=0), 5)
        # refused at the first PUBLISH (0x82); what comes while the close lingers (2 s) is
        # read and discarded, never held
        closed = _push(raw.sock, packet * 1000, 30.0)
        grown = process.memory_info().rss - before
        assert closed, "the broker never closed the connection (30 s, its linger is 2 s)"
        assert grown < 16 * 1024 * 1024, f"RSS grew by {grown} bytes"
    finally:
        raw.close()


def test_an_incomplete_packet_during_an_exchange_is_bounded(broker: BrokerProcess) -> None:
    raw = scram_started(broker.port)
    try:
        # an AUTH announcing 900 kB (under the 1 MB packet limit) whose body never ends
        header = bytes(
            (0xF0, 0x80 | (900_000 & 0x7F), 0x80 | ((900_000 >> 7) & 0x7F), 900_000 >> 14)
        )
        raw.send(header + b"\x18" * (80 * 1024))
        [ack] = raw.read_until_closed(timeout=5)
        assert isinstance(ack, Connack) and ack.reason_code == 0x95  # Packet too large
    finally:
        raw.close()
