"""Broker processes on a real PostgreSQL account store, administered with the `xmq` CLI:
changes take effect on connected clients of any node without a restart."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient
from xmq.codec.packets import (
    Connack,
    Connect,
    Disconnect,
    Publish,
    Suback,
    Subscribe,
    SubscriptionRequest,
)

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
