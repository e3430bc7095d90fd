"""Failed TLS handshakes on a real broker: counted in /metrics by listener and reason, logged
at most once a minute per reason (with the count), and the listener keeps serving."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.certificates import TestCertificateAuthority
from tests.support.http_probe import http, metric, wait_port
from xmq.codec.packets import MQTT_5, Connect
from xmq.codec.writer import encode

pytestmark = pytest.mark.integration

StartBroker = Callable[..., BrokerProcess]
FAILURES = "xmq_tls_handshake_failures_total"


def _send_and_wait_close(port: int, data: bytes) -> str:
    """Send ``data`` to the TLS port and wait until the broker closes the connection; return
    our end's ``ip:port`` (the peer the broker sees)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        host, local_port = sock.getsockname()[:2]
        sock.sendall(data)
        try:
            while sock.recv(4096):
                pass
        except ConnectionResetError:
            pass
    return f"{host}:{local_port}"


def _handshake(port: int, context: ssl.SSLContext) -> None:
    """A TLS handshake the broker (or we) refuse: a TLS or socket error, or (TLS 1.3, where
    the client finishes first) the connection closed before any byte."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.recv(1) == b"", "the broker accepted the handshake"
        except (ssl.SSLError, OSError):
            return


def _wait_metric(port: int, labels: str, wanted: float) -> float:
    deadline = time.monotonic() + 10
    value = metric(port, FAILURES, labels)
    while value < wanted and time.monotonic() < deadline:
        time.sleep(0.05)
        value = metric(port, FAILURES, labels)
    return value


@pytest.mark.parametrize("uvloop", ["true", "false"], ids=["uvloop", "asyncio"])
def test_handshake_failures_are_counted_and_logged_once_a_minute(
    start_broker: StartBroker, tmp_path: Path, uid: str, uvloop: str
) -> None:
    ca = TestCertificateAuthority(tmp_path)
    other_ca = TestCertificateAuthority(tmp_path, name="another CA")
    server = ca.issue("xmq server", "server")
    device = ca.issue("device-1", "device", server=False)
    stranger = other_ca.issue("device-2", "stranger", server=False)
    broker = start_broker(
        "listeners:\n"
        "  - {name: mqtt, protocol: tcp}\n"
        "  - name: mtls\n"
        "    protocol: tls\n"
        "    host: 127.0.0.1\n"
        "    port: 0\n"
        "    tls:\n"
        f"      cert_file: {server.cert_file}\n"
        f"      key_file: {server.key_file}\n"
        f"      ca_file: {ca.ca_file}\n"
        "      client_certs: required\n",
        XMQ_USE_UVLOOP=uvloop,
    )
    tls_port = wait_port(broker, "mtls")
    http_port = wait_port(broker, "metrics")

    connect = encode(Connect(protocol_version=MQTT_5, client_id=f"{uid}-plain"), MQTT_5)
    first = _send_and_wait_close(tls_port, connect)  # plain MQTT to the TLS port, 5 times
    for _ in range(4):
        _send_and_wait_close(tls_port, connect)
    _send_and_wait_close(tls_port, b"\x16\x03\x01\x00\x05garbage-after-a-record-header")
    wrong_ca = ssl.create_default_context(cafile=str(ca.ca_file))
    wrong_ca.load_cert_chain(str(stranger.cert_file), str(stranger.key_file))
    _handshake(tls_port, wrong_ca)  # a client certificate from another CA
    distrusting = ssl.create_default_context(cafile=str(other_ca.ca_file))
    _handshake(tls_port, distrusting)  # a client that does not trust our certificate

    labels = 'listener="mtls",reason="wrong_version_number"'
    assert _wait_metric(http_port, labels, 5) == 5
    verify = 'listener="mtls",reason="certificate_verify_failed"'
    assert _wait_metric(http_port, verify, 1) == 1
    unknown_ca = 'listener="mtls",reason="tlsv1_alert_unknown_ca"'
    assert _wait_metric(http_port, unknown_ca, 1) == 1
    body = _metrics_text(http_port)
    garbage = [line for line in body.splitlines() if line.startswith(FAILURES + "{")]
    total = sum(float(line.rsplit(" ", 1)[1]) for line in garbage)
    assert total == 8, garbage  # the garbage record counted under its own reason

    log = broker.log()
    lines = [line for line in log.splitlines() if "TLS handshake with" in line]
    wrong_version = [line for line in lines if "WRONG_VERSION_NUMBER" in line]
    assert len(wrong_version) == 1, lines  # five failures, one line within the minute
    # the listener, and the peer (ip:port) of the failure logged: the first
    assert f"listener mtls: TLS handshake with {first} failed" in wrong_version[0]
    assert any("CERTIFICATE_VERIFY_FAILED" in line for line in lines), lines
    assert "Traceback" not in log

    good = ssl.create_default_context(cafile=str(ca.ca_file))  # the listener still serves
    good.load_cert_chain(str(device.cert_file), str(device.key_file))
    with (
        socket.create_connection(("127.0.0.1", tls_port), timeout=10) as raw,
        good.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(encode(Connect(protocol_version=MQTT_5, client_id=f"{uid}-good"), MQTT_5))
        assert tls.recv(1) == b"\x20"  # CONNACK


def _metrics_text(port: int) -> str:
    return http(port, "/metrics")[1]
