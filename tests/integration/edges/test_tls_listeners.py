"""TLS and mTLS listeners with a throw-away CA: paho, mosquitto_sub, certificate reload."""

from __future__ import annotations

import queue
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.certificates import IssuedPair, TestCertificateAuthority
from tests.support.http_probe import metric, wait_port
from tests.support.paho_client import PahoClient

pytestmark = pytest.mark.integration

StartBroker = Callable[..., BrokerProcess]


def _tls_config(server: IssuedPair, extra: str = "", reload_s: float = 0) -> str:
    return (
        "listeners:\n"
        "  - {name: mqtt, protocol: tcp}\n"
        "  - name: mqtts\n"
        "    protocol: tls\n"
        "    host: 127.0.0.1\n"
        "    port: 0\n"
        "    tls:\n"
        f"      cert_file: {server.cert_file}\n"
        f"      key_file: {server.key_file}\n"
        f"      reload_interval_s: {reload_s}\n"
        f"{extra}"
    )


def _served_serial(port: int, ca_file: Path) -> int:
    """The serial number of the certificate a new handshake gets."""
    context = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    from cryptography import x509

    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_paho_and_mosquitto_sub_over_tls(
    start_broker: StartBroker, tmp_path: Path, uid: str
) -> None:
    ca = TestCertificateAuthority(tmp_path)
    server = ca.issue("xmq server", "server")
    broker = start_broker(_tls_config(server))
    tls_port = wait_port(broker, "mqtts")
    mosquitto = subprocess.Popen(
        [
            "mosquitto_sub",
            "-h", "127.0.0.1", "-p", str(tls_port),
            "--cafile", str(ca.ca_file),
            "-t", f"{uid}/tls", "-C", "1", "-q", "1", "-V", "mqttv5", "-W", "10",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    client = PahoClient(tls_port, f"{uid}-paho")
    client.client.tls_set(ca_certs=str(ca.ca_file))
    try:
        assert client.connect().reason == 0
        assert client.subscribe(f"{uid}/tls", qos=1) == [1]
        deadline = time.monotonic() + 10
        while metric(wait_port(broker, "metrics"), "xmq_subscriptions") < 2:
            assert time.monotonic() < deadline, "mosquitto_sub did not subscribe"
            time.sleep(0.05)
        assert client.publish(f"{uid}/tls", b"over tls", qos=1) == 0
        assert client.expect(1)[0].payload == b"over tls"
        out, err = mosquitto.communicate(timeout=10)
        assert mosquitto.returncode == 0, err
        assert out.strip() == "over tls"
    finally:
        client.close()
        if mosquitto.poll() is None:
            mosquitto.kill()
            mosquitto.wait()


def test_plain_client_cannot_speak_mqtt_to_the_tls_port(
    start_broker: StartBroker, tmp_path: Path
) -> None:
    ca = TestCertificateAuthority(tmp_path)
    broker = start_broker(_tls_config(ca.issue("xmq server", "server")))
    tls_port = wait_port(broker, "mqtts")
    client = PahoClient(tls_port, "plain")
    with pytest.raises(Exception):  # noqa: B017 - paho raises whatever the socket says
        client.connect(timeout=3)
    client.close()
    assert broker.proc.poll() is None


def test_mutual_tls_and_common_name_as_user(
    start_broker: StartBroker, tmp_path: Path, uid: str
) -> None:
    ca = TestCertificateAuthority(tmp_path)
    server = ca.issue("xmq server", "server")
    device = ca.issue("device-17", "device", server=False)
    stranger_ca = TestCertificateAuthority(tmp_path, "stranger CA")
    stranger = stranger_ca.issue("intruder", "intruder", server=False)
    extra = (
        f"      ca_file: {ca.ca_file}\n"
        "      client_certs: required\n"
        "      cn_as_username: true\n"
        "auth: {allow_anonymous: false}\n"
    )
    broker = start_broker(_tls_config(server, extra))
    tls_port = wait_port(broker, "mqtts")
    # A certificate from our CA logs in as its CN although CONNECT carries no user name.
    good = PahoClient(tls_port, f"{uid}-device")
    good.client.tls_set(
        ca_certs=str(ca.ca_file), certfile=str(device.cert_file), keyfile=str(device.key_file)
    )
    try:
        assert good.connect().reason == 0
    finally:
        good.close()
    # The same client without its certificate, or with a foreign one, fails the handshake.
    for certfile, keyfile in ((None, None), (stranger.cert_file, stranger.key_file)):
        bad = PahoClient(tls_port, f"{uid}-bad")
        bad.client.tls_set(
            ca_certs=str(ca.ca_file),
            certfile=str(certfile) if certfile else None,
            keyfile=str(keyfile) if keyfile else None,
        )
        # TLS 1.3: the client may finish its side first and see the alert later (no CONNACK)
        with pytest.raises((ssl.SSLError, OSError, queue.Empty)):
            bad.connect(timeout=2)
        bad.close()
    assert metric(wait_port(broker, "metrics"), "xmq_connects_total") == 1
    # The plain listener still refuses anonymous clients: the CN rule is per listener.
    plain = PahoClient(broker.port, f"{uid}-plain")
    try:
        assert plain.connect().reason == 0x86
    finally:
        plain.close()


def test_certificate_reload_keeps_open_connections(
    start_broker: StartBroker, tmp_path: Path, uid: str
) -> None:
    ca = TestCertificateAuthority(tmp_path)
    first = ca.issue("xmq server", "server")
    broker = start_broker(_tls_config(first, reload_s=0.2))
    tls_port = wait_port(broker, "mqtts")
    metrics_port = wait_port(broker, "metrics")
    assert _served_serial(tls_port, ca.ca_file) == first.serial
    client = PahoClient(tls_port, f"{uid}-long-lived")
    client.client.tls_set(ca_certs=str(ca.ca_file))
    try:
        assert client.connect().reason == 0
        assert client.subscribe(f"{uid}/r", qos=1) == [1]
        # 1. the files change: picked up by the watcher, no signal needed
        second = ca.issue("xmq server", "server")
        deadline = time.monotonic() + 10
        while _served_serial(tls_port, ca.ca_file) != second.serial:
            assert time.monotonic() < deadline, "new certificate not served"
            time.sleep(0.1)
        # 2. SIGHUP reloads at once (watcher is slow to notice here: same files again)
        third = ca.issue("xmq server", "server")
        broker.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while _served_serial(tls_port, ca.ca_file) != third.serial:
            assert time.monotonic() < deadline, "SIGHUP did not reload"
            time.sleep(0.05)
        label = 'listener="mqtts"'
        assert metric(metrics_port, "xmq_certificate_reloads_total", label) >= 2
        # the connection opened before both reloads still works
        assert client.publish(f"{uid}/r", b"still here", qos=1) == 0
        assert client.expect(1)[0].payload == b"still here"
        # a broken pair is refused and the served certificate stays the last good one
        (tmp_path / "server.crt").write_text("not a certificate")
        broker.proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        assert _served_serial(tls_port, ca.ca_file) == third.serial
        assert "certificate reload failed" in broker.log()
    finally:
        client.close()
