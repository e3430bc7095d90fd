"""Broker processes on a real PostgreSQL account store, administered with the `xmq` CLI:
changes take effect on connected clients of any node without a restart."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient
from xmq.codec.packets import (
    Connack,
    Connect,
    Disconnect,
    Puback,
    Publish,
    Suback,
    Subscribe,
    SubscriptionRequest,
)
from xmq.codec.properties import Properties

StartBroker = Callable[..., BrokerProcess]


def _xmq(dsn: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XMQ_AUTH__POSTGRES_DSN=dsn)
    return subprocess.run(
        [sys.executable, "-m", "xmq", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def _login(port: int, client_id: str, user: str, password: bytes) -> tuple[RawClient, int]:
    raw = RawClient(port)
    raw.send_packet(Connect(client_id=client_id, username=user, password=password))
    ack = raw.read_packet()
    assert isinstance(ack, Connack)
    return raw, ack.reason_code


def test_cli_changes_apply_to_connected_clients(
    start_broker: StartBroker, postgres_dsn: str
) -> None:
    assert _xmq(postgres_dsn, "db", "migrate").returncode == 0
    added = _xmq(postgres_dsn, "users", "add", "dev1", stdin="s3cret\n")
    assert added.returncode == 0, added.stderr
    rule = _xmq(postgres_dsn, "acl", "add", "allow", "both", "devices/%u/#", "--group", "default")
    assert rule.returncode == 0, rule.stderr
    env = {"XMQ_AUTH__POSTGRES_DSN": postgres_dsn, "XMQ_AUTH__ALLOW_ANONYMOUS": "false"}
    # Two nodes on the same account database: the client sits on the second one, the change
    # is made with the CLI against the database, and reaches it through LISTEN/NOTIFY.
    first = start_broker(**env)
    broker = start_broker(**env)
    probe, probe_code = _login(first.port, "probe", "dev1", b"s3cret")
    probe.close()
    assert probe_code == 0

    failed, wrong = _login(broker.port, "c0", "dev1", b"nope")
    failed.close()
    assert wrong == 0x86
    raw, ok = _login(broker.port, "c1", "dev1", b"s3cret")
    assert ok == 0
    try:
        raw.send_packet(
            Subscribe(
                1,
                [SubscriptionRequest("devices/dev1/#", 1), SubscriptionRequest("devices/x/#", 1)],
            )
        )
        ack = raw.read_packet()
        assert isinstance(ack, Suback) and ack.reason_codes == [1, 0x87]
        disabled = _xmq(postgres_dsn, "users", "disable", "dev1")
        assert disabled.returncode == 0, disabled.stderr
        started = time.monotonic()
        packets = raw.read_until_closed(timeout=10)
        assert time.monotonic() - started < 5
        closing = [p for p in packets if isinstance(p, Disconnect)]
        assert closing and closing[-1].reason_code == 0x87
    finally:
        raw.close()
    again, refused = _login(broker.port, "c2", "dev1", b"s3cret")
    again.close()
    assert refused == 0x87
    assert not [p for p in packets if isinstance(p, Publish)]


def test_a_rule_deleted_while_offline_applies_to_the_resumed_session(
    start_broker: StartBroker, postgres_dsn: str
) -> None:
    assert _xmq(postgres_dsn, "db", "migrate").returncode == 0
    for user in ("dev2", "dev3"):
        assert _xmq(postgres_dsn, "users", "add", user, stdin="s3cret\n").returncode == 0
    rule = _xmq(postgres_dsn, "acl", "add", "allow", "both", "devices/%u/#", "--group", "default")
    assert rule.returncode == 0, rule.stderr
    rule_id = rule.stdout.split()[-1]
    env = {"XMQ_AUTH__POSTGRES_DSN": postgres_dsn, "XMQ_AUTH__ALLOW_ANONYMOUS": "false"}
    broker = start_broker(**env)
    expiry = Properties()
    expiry.session_expiry_interval = 300
    raw = RawClient(broker.port)
    raw.send_packet(
        Connect(clean_start=True, client_id="dev2-s", username="dev2", password=b"s3cret",
                properties=expiry)
    )  # fmt: skip
    assert isinstance(ack := raw.read_packet(), Connack) and ack.reason_code == 0
    raw.send_packet(Subscribe(1, [SubscriptionRequest("devices/dev2/#", 1)]))
    assert isinstance(sub := raw.read_packet(), Suback) and sub.reason_codes == [1]
    raw.send_packet(Disconnect())
    raw.close()
    publisher, code = _login(broker.port, "dev2-p", "dev2", b"s3cret")
    assert code == 0
    publisher.send_packet(Publish("devices/dev2/x", b"queued", qos=1, packet_id=1))
    assert isinstance(publisher.read_packet(), Puback)
    # another user with that client id is refused, the session stays
    intruder, code = _login(broker.port, "dev2-s", "dev3", b"s3cret")
    intruder.close()
    assert code == 0x87
    # the rule goes (a live change: NOTIFY) while dev2 is offline
    assert _xmq(postgres_dsn, "acl", "del", rule_id).returncode == 0
    deadline = time.monotonic() + 10
    for packet_id in range(2, 1000):  # until the node has the change: dev2's PUBLISH denied
        publisher.send_packet(Publish("devices/dev2/y", b"poll", qos=1, packet_id=packet_id))
        puback = publisher.read_packet()
        assert isinstance(puback, Puback)
        if puback.reason_code == 0x87:
            break
        assert time.monotonic() < deadline, "the rule change did not reach the node"
        time.sleep(0.05)
    publisher.close()
    raw = RawClient(broker.port)
    raw.send_packet(
        Connect(clean_start=False, client_id="dev2-s", username="dev2", password=b"s3cret",
                properties=expiry)
    )  # fmt: skip
    ack = raw.read_packet()
    assert isinstance(ack, Connack) and (ack.reason_code, ack.session_present) == (0, True)
    try:
        with pytest.raises(TimeoutError):
            raw.read_packet(timeout=1.5)  # the queued messages are not delivered
    finally:
        raw.close()
