"""JSON log lines and the log level changed at runtime by SIGHUP."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.paho_client import PahoClient

pytestmark = pytest.mark.integration

StartBroker = Callable[..., BrokerProcess]
BASE = "auth: {allow_anonymous: false}\n"


def _json_lines(broker: BrokerProcess) -> list[dict[str, str]]:
    return [json.loads(line) for line in broker.log().splitlines() if line.startswith("{")]


def _refused_client(port: int, client_id: str) -> None:
    client = PahoClient(port, client_id)
    try:
        assert client.connect().reason == 0x86
    finally:
        client.close()


def test_sighup_changes_the_log_level(start_broker: StartBroker, uid: str) -> None:
    broker = start_broker(BASE + "log: {level: WARNING, json_format: true}\n")
    config_file = broker.log_path.parent / "xmq.yaml"
    _refused_client(broker.port, f"{uid}-quiet")
    time.sleep(0.2)
    assert not any(f"{uid}-quiet" in entry["message"] for entry in _json_lines(broker))
    config_file.write_text(BASE + "log: {level: INFO, json_format: true}\n")
    broker.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while not any("SIGHUP: log level INFO" in e["message"] for e in _json_lines(broker)):
        assert time.monotonic() < deadline, broker.log()
        time.sleep(0.05)
    _refused_client(broker.port, f"{uid}-loud")
    deadline = time.monotonic() + 5
    while True:
        refused = [e for e in _json_lines(broker) if f"({uid}-loud)" in e["message"]]
        if refused:
            break
        assert time.monotonic() < deadline, broker.log()
        time.sleep(0.05)
    entry = refused[0]
    assert entry["level"] == "INFO"
    assert entry["logger"] == "xmq.connection"
    assert entry["message"].startswith("refused 127.0.0.1:")
    assert "0x86" in entry["message"]
