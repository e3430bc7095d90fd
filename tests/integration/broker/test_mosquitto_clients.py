"""Interoperability with the Mosquitto command-line clients (mosquitto_pub / mosquitto_sub)."""

from __future__ import annotations

import select
import subprocess

import pytest

from tests.support.broker_process import BrokerProcess


def _sub(port: int, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _pub(port: int, *args: str) -> None:
    subprocess.run(
        ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), *args],
        check=True,
        timeout=10,
        capture_output=True,
    )


def _first_line(proc: subprocess.Popen[str], timeout: float = 10.0) -> str:
    """The subscriber's first output line: proof that its subscription is in place."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "mosquitto_sub printed nothing"
    return proc.stdout.readline().rstrip("\n")


@pytest.mark.spec("3:MQTT-7.0.0-2")  # another implementation, no extension needed
@pytest.mark.parametrize("version", ["mqttv5", "mqttv311", "mqttv31"], ids=["v5", "v311", "v31"])
@pytest.mark.parametrize("qos", ["0", "1", "2"], ids=["qos0", "qos1", "qos2"])
def test_pub_sub_roundtrip(broker: BrokerProcess, uid: str, version: str, qos: str) -> None:
    topic = f"{uid}/{version}/{qos}"
    _pub(broker.port, "-V", version, "-t", f"{topic}/ready", "-m", "r", "-r", "-q", "1")
    sub = _sub(
        broker.port, "-V", version, "-q", qos, "-t", f"{topic}/#", "-C", "4", "-v", "-W", "10"
    )
    try:
        assert _first_line(sub) == f"{topic}/ready r"
        for n in range(3):
            _pub(broker.port, "-V", version, "-q", qos, "-t", f"{topic}/m", "-m", f"hello {n}")
        out, err = sub.communicate(timeout=15)
        assert sub.returncode == 0, err
        assert out.splitlines() == [f"{topic}/m hello {n}" for n in range(3)]
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.communicate()


def test_retained_with_mosquitto_sub(broker: BrokerProcess, uid: str) -> None:
    _pub(broker.port, "-t", f"{uid}/state", "-m", "on", "-r", "-q", "1")
    out = subprocess.run(
        [
            "mosquitto_sub",
            "-h",
            "127.0.0.1",
            "-p",
            str(broker.port),
            "-t",
            f"{uid}/+",
            "-C",
            "1",
            "-v",
            "-W",
            "5",
            "-F",
            "%t %p %r",
        ],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert out.stdout.strip() == f"{uid}/state on 1"


def test_user_properties_with_mosquitto(broker: BrokerProcess, uid: str) -> None:
    _pub(
        broker.port,
        "-V",
        "mqttv5",
        "-t",
        f"{uid}/p",
        "-m",
        "x",
        "-r",
        "-q",
        "1",
        "-D",
        "publish",
        "user-property",
        "k",
        "v",
    )
    out = subprocess.run(
        [
            "mosquitto_sub",
            "-h",
            "127.0.0.1",
            "-p",
            str(broker.port),
            "-V",
            "mqttv5",
            "-t",
            f"{uid}/p",
            "-C",
            "1",
            "-W",
            "5",
            "-F",
            "%P",
        ],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert out.stdout.strip() == "k:v"
