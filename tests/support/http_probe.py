"""Small helpers for the broker's HTTP endpoint and extra listeners in integration tests."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.broker_process import BrokerProcess
from tests.support.certificates import TestCertificateAuthority


def wait_port(process: BrokerProcess, name: str, timeout: float = 10.0) -> int:
    """The port of listener ``name`` (printed after the first one, read by a thread)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        port = process.ports.get(name)
        if port:
            return port
        if process.proc.poll() is not None:
            break
        time.sleep(0.02)
    raise RuntimeError(f"listener {name} did not start; log:\n{process.log()}")


@contextmanager
def listening_broker(config_yaml: str, last_listener: str) -> Iterator[BrokerProcess]:
    """A broker process with every listener bound (``last_listener``: the last one's name)."""
    process = BrokerProcess(config_yaml)
    try:
        wait_port(process, last_listener)
        yield process
    finally:
        process.stop()


@contextmanager
def websocket_broker(directory: Path) -> Iterator[tuple[BrokerProcess, Path]]:
    """A broker with listeners ``mqtt`` (tcp), ``ws`` at ``/mqtt`` and ``wss`` at ``/secure``
    (a certificate of a test CA made in ``directory``); yields it and the CA file."""
    ca = TestCertificateAuthority(directory)
    server = ca.issue("xmq server", "server")
    config = (
        "listeners:\n"
        "  - {name: mqtt, protocol: tcp}\n"
        "  - {name: ws, protocol: ws, host: 127.0.0.1, port: 0, ws_path: /mqtt}\n"
        "  - name: wss\n"
        "    protocol: wss\n"
        "    host: 127.0.0.1\n"
        "    port: 0\n"
        "    ws_path: /secure\n"
        f"    tls: {server.tls_yaml()}\n"
    )
    with listening_broker(config, "wss") as process:
        yield process, ca.ca_file


def http(
    port: int, path: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, str]:
    """(status, body) of one request to 127.0.0.1:port; HTTP errors are returned, not raised."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", method=method, headers=headers or {}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def metric(port: int, name: str, labels: str = "") -> float:
    """One sample of ``/metrics`` (``labels`` as written: ``listener="mqtt"``); 0 if absent."""
    _status, body = http(port, "/metrics")
    wanted = f"{name}{{{labels}}}" if labels else name
    for line in body.splitlines():
        key, _, value = line.rpartition(" ")
        if key == wanted:
            return float(value)
    return 0.0
