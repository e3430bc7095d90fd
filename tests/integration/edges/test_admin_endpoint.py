"""The admin endpoint of a real broker needs the bearer token; metrics and probes stay open."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.http_probe import http, wait_port
from tests.support.paho_client import PahoClient
from tests.support.redis_server import free_port

pytestmark = pytest.mark.integration

StartBroker = Callable[..., BrokerProcess]
TOKEN = "s3cret-admin-token-0123456789"


def _xmq_drain(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xmq", "drain", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=dict(os.environ, **(env or {})),
    )


def test_drain_needs_the_token(start_broker: StartBroker, uid: str, tmp_path: Path) -> None:
    token_file = tmp_path / "admin-token"
    token_file.write_text(TOKEN + "\n")  # a Secret's file may end with a newline
    port = free_port()
    config_text = f"metrics: {{host: 127.0.0.1, port: {port}, admin_token_file: '{token_file}'}}\n"
    config = tmp_path / "node.yaml"  # what the pod's preStop `xmq drain` reads ($XMQ_CONFIG)
    config.write_text(config_text)
    broker = start_broker(config_text, XMQ_METRICS__PORT=str(port))
    assert wait_port(broker, "metrics") == port
    client = PahoClient(broker.port, f"{uid}-c")
    try:
        assert client.connect().reason == 0
        # metrics and probes: open
        assert http(port, "/metrics")[0] == 200
        assert http(port, "/healthz")[0] == 200
        assert http(port, "/readyz")[0] == 200
        # admin: no token, another scheme, a wrong token (also one of the same length)
        assert http(port, "/admin/drain", "POST")[0] == 401
        basic = {"Authorization": "Basic YWRtaW46YWRtaW4="}
        assert http(port, "/admin/drain", "POST", basic)[0] == 401
        for wrong in ("nope", TOKEN[:-1] + "X", TOKEN + "X"):
            status, body = http(port, "/admin/drain", "POST", {"Authorization": f"Bearer {wrong}"})
            assert status == 401, body
        refused = _xmq_drain("--url", f"http://127.0.0.1:{port}")  # no config: no token
        assert refused.returncode == 1
        assert "401" in refused.stderr
        assert http(port, "/readyz")[0] == 200  # not draining
        assert client.disconnects.empty()

        done = _xmq_drain(env={"XMQ_CONFIG": str(config)})  # as the preStop hook runs it
        assert done.returncode == 0, done.stderr
        assert "1 clients disconnected" in done.stdout
        assert client.disconnects.get(timeout=10).reason == 0x8B
        assert http(port, "/readyz")[0] == 503
        again = _xmq_drain("--url", f"http://127.0.0.1:{port}", "--token-file", str(token_file))
        assert again.returncode == 0, again.stderr
    finally:
        client.close()


def test_without_a_token_loopback_may_drain(start_broker: StartBroker) -> None:
    """No token file: the admin endpoint answers loopback clients (the pod's preStop hook);
    other addresses get 403 (``tests/unit/observability/test_admin_access.py``)."""
    broker = start_broker()
    port = wait_port(broker, "metrics")
    status, body = http(port, "/admin/drain", "POST")
    assert status == 202, body
    assert "draining" in body
