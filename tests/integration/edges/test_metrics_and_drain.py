"""The HTTP endpoint of a real broker: metrics move, probes answer, drain and SIGTERM."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.http_probe import http, metric, wait_port
from tests.support.paho_client import V5, V311, PahoClient
from tests.support.raw_client import RawClient

pytestmark = pytest.mark.integration

StartBroker = Callable[..., BrokerProcess]


def test_metrics_move_with_traffic(start_broker: StartBroker, uid: str) -> None:
    broker = start_broker("auth: {allow_anonymous: false}\n")
    port = wait_port(broker, "metrics")
    assert metric(port, "xmq_messages_received_total") == 0
    sub = PahoClient(broker.port, f"{uid}-sub")
    sub.client.username_pw_set("alice")
    pub = PahoClient(broker.port, f"{uid}-pub")
    pub.client.username_pw_set("bob")
    try:
        assert sub.connect().reason == 0
        assert sub.subscribe(f"{uid}/t", qos=1) == [1]
        assert pub.connect().reason == 0
        for n in range(5):
            assert pub.publish(f"{uid}/t", f"m{n}".encode(), qos=1) == 0
        sub.expect(5)
        assert metric(port, "xmq_messages_received_total") == 5
        assert metric(port, "xmq_messages_sent_total") == 5
        assert metric(port, "xmq_clients_connected") == 2
        assert metric(port, "xmq_subscriptions") == 1
        assert metric(port, "xmq_sessions") == 2
        assert metric(port, "xmq_listener_connections", 'listener="mqtt"') == 2
        assert metric(port, "xmq_bytes_received_total") > 100
        anonymous = PahoClient(broker.port, f"{uid}-anon")
        assert anonymous.connect().reason == 0x86
        anonymous.close()
        assert metric(port, "xmq_auth_failures_total") == 1
        labels = 'reason="bad_user_name_or_password"'
        assert metric(port, "xmq_connects_refused_total", labels) == 1
    finally:
        sub.close()
        pub.close()


def test_probes_and_drain_with_server_reference(start_broker: StartBroker, uid: str) -> None:
    broker = start_broker("shutdown: {server_reference: 'other.example:1884'}\n")
    port = wait_port(broker, "metrics")
    assert http(port, "/healthz")[0] == 200
    status, body = http(port, "/readyz")
    assert status == 200, body
    v5 = PahoClient(broker.port, f"{uid}-v5")
    v3 = PahoClient(broker.port, f"{uid}-v3", version=V311)
    try:
        assert v5.connect().reason == 0
        assert v3.connect().reason == 0
        drain = subprocess.run(
            [sys.executable, "-m", "xmq", "drain", "--url", f"http://127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert drain.returncode == 0, drain.stderr
        assert "2 clients disconnected" in drain.stdout
        gone = v5.disconnects.get(timeout=5)
        assert gone.reason == 0x9C
        assert gone.properties.ServerReference == "other.example:1884"
        assert v3.disconnects.get(timeout=5).reason != 0  # closed without DISCONNECT
        status, body = http(port, "/readyz")
        assert status == 503
        assert '"draining": "draining"' in body
        with pytest.raises(OSError):
            RawClient(broker.port)
        assert broker.proc.poll() is None  # drain does not exit
        assert broker.terminate() == 0
    finally:
        v5.close()
        v3.close()


def test_sigterm_disconnects_with_0x8b_and_exits(start_broker: StartBroker, uid: str) -> None:
    broker = start_broker("shutdown: {grace_s: 3}\n")
    client = PahoClient(broker.port, f"{uid}-v5", version=V5)
    try:
        assert client.connect().reason == 0
        started = time.monotonic()
        assert broker.terminate() == 0
        assert time.monotonic() - started < 3.5
        assert client.disconnects.get(timeout=5).reason == 0x8B
    finally:
        client.close()
