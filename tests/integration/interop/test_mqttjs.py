"""Interop with a second client library: MQTT.js (npm, pinned in tests/interop/mqttjs) over
TCP, WebSocket and secure WebSocket, MQTT 5.0 and 3.1.1, against a real broker.

The node script runs one scenario and reports what it saw; the assertions are here. Its
packages are installed by ``scripts/setup-node`` (called by ``scripts/test``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.http_probe import wait_port, websocket_broker

pytestmark = pytest.mark.integration

SCRIPT_DIR = Path(__file__).resolve().parents[2] / "interop" / "mqttjs"


@pytest.fixture(scope="module")
def interop_broker(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BrokerProcess, Path]]:
    node = shutil.which("node")
    assert node is not None, "node is missing: run scripts/setup-system"
    assert (SCRIPT_DIR / "node_modules" / "mqtt").is_dir(), "run scripts/setup-node"
    directory = tmp_path_factory.mktemp("mqttjs")
    with websocket_broker(directory) as started:
        yield started


def _run(url: str, version: int, uid: str, ca: Path | None) -> dict[str, Any]:
    scenario = {"url": url, "version": version, "uid": uid, "ca": str(ca) if ca else None}
    done = subprocess.run(
        ["node", "interop.mjs", json.dumps(scenario)],
        cwd=SCRIPT_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.spec("3:MQTT-7.0.0-2")  # another implementation, no extension needed
@pytest.mark.parametrize("version", [5, 4], ids=["v5", "v311"])
@pytest.mark.parametrize("transport", ["tcp", "ws", "wss"])
def test_mqttjs_scenario(
    interop_broker: tuple[BrokerProcess, Path], transport: str, version: int, uid: str
) -> None:
    broker, ca_file = interop_broker
    if transport == "tcp":
        url = f"mqtt://127.0.0.1:{broker.port}"
    else:
        path = "/secure" if transport == "wss" else "/mqtt"
        url = f"{transport}://127.0.0.1:{wait_port(broker, transport)}{path}"
    report = _run(url, version, uid, ca_file if transport == "wss" else None)
    ok = 0
    nobody = 0x10 if version == 5 else 0  # retained, but no subscriber matched (3.1.1: none)
    assert report["subscribeGranted"] == [2]
    # QoS 0 gets no ack; QoS 1 a PUBACK, QoS 2 a PUBREC, both success
    assert report["publishAcks"][0] is None
    assert [a["cmd"] for a in report["publishAcks"][1:]] == ["puback", "pubrec"]
    assert all(a["reasonCode"] == ok for a in report["publishAcks"][1:])
    received = sorted(report["received"], key=lambda m: m["qos"])
    assert [(m["topic"], m["payload"], m["qos"]) for m in received] == [
        (f"{uid}/q/{qos}", f"m{qos}", qos) for qos in (0, 1, 2)
    ]
    if version == 5:
        assert all(m["userProperties"] == {"from": "mqtt.js"} for m in received)
    # retained set and clear (the empty payload is a zero-length WebSocket message)
    assert report["retainSetAck"] == {"cmd": "puback", "reasonCode": nobody}
    assert report["retainedSeen"] == [{"payload": "keep", "retain": True}]
    assert report["retainClearAcks"] == [{"cmd": "puback", "reasonCode": nobody}] * 6
    assert report["retainedAfterClear"] == []
    assert report["will"] == [{"topic": f"{uid}/will", "payload": "gone"}]
    assert report["firstSessionPresent"] is False
    # the offline subscriber's queued message: success, not "no matching subscribers"
    assert report["offlineAck"] == {"cmd": "puback", "reasonCode": ok}
    assert report["resumedSessionPresent"] is True
    assert report["resumedMessages"] == [{"payload": "queued", "qos": 1}]
    assert "Traceback" not in broker.log()
