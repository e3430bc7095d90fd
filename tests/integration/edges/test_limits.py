"""Limits and overload: each one hit by a real client, its reason code observed and counted."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.http_probe import metric, wait_port
from tests.support.paho_client import V311, PahoClient
from tests.support.raw_client import RawClient
from xmq.codec.packets import Publish, Suback, Subscribe, SubscriptionRequest

pytestmark = pytest.mark.integration

StartBroker = Callable[..., BrokerProcess]

CONFIG = """\
mqtt: {max_subscriptions_per_client: 2, max_topic_levels: 3, max_topic_length: 40}
limits: {max_inflight_messages: 2}
listeners:
  - {name: mqtt, protocol: tcp}
  - {name: capped, protocol: tcp, host: 127.0.0.1, port: 0, max_connections: 2}
  - {name: rated, protocol: tcp, host: 127.0.0.1, port: 0, max_connection_rate: 1,
     connection_rate_burst: 2}
  - {name: slow, protocol: tcp, host: 127.0.0.1, port: 0, publish_rate: 20, publish_burst: 5}
"""


@pytest.fixture(scope="module")
def limited() -> Iterator[BrokerProcess]:
    process = BrokerProcess(CONFIG)
    try:
        wait_port(process, "slow")
        yield process
    finally:
        process.stop()


def _refused(broker: BrokerProcess, reason: str) -> float:
    return metric(wait_port(broker, "metrics"), "xmq_connects_refused_total", f'reason="{reason}"')


def test_listener_connection_limit(limited: BrokerProcess, uid: str) -> None:
    port = wait_port(limited, "capped")
    clients = [PahoClient(port, f"{uid}-{n}") for n in range(2)]
    over_v5 = PahoClient(port, f"{uid}-over5")
    over_v3 = PahoClient(port, f"{uid}-over3", version=V311)
    later = PahoClient(port, f"{uid}-later")
    try:
        for client in clients:
            assert client.connect().reason == 0
        assert over_v5.connect().reason == 0x97  # quota exceeded
        assert over_v3.connect().reason == 0x88  # 3.1.1 code 3, which paho reports as 0x88
        assert _refused(limited, "quota_exceeded") == 2
        metrics_port = wait_port(limited, "metrics")
        capped = metric(metrics_port, "xmq_listener_connections", 'listener="capped"')
        assert capped == 2
        clients[0].disconnect()
        deadline = time.monotonic() + 5
        while True:  # the slot frees when the broker sees the close
            result = later.connect()
            if result.reason == 0:
                break
            assert time.monotonic() < deadline, "slot not freed"
            later.close()
            later = PahoClient(port, f"{uid}-later")
            time.sleep(0.1)
    finally:
        for client in (*clients, over_v5, over_v3, later):
            client.close()


def test_connection_rate_limit(limited: BrokerProcess, uid: str) -> None:
    port = wait_port(limited, "rated")
    time.sleep(2.1)  # a full bucket
    clients = [PahoClient(port, f"{uid}-{n}") for n in range(3)]
    try:
        reasons = [client.connect().reason for client in clients]
        assert reasons == [0, 0, 0x9F]  # burst of 2, then connection rate exceeded
        assert _refused(limited, "connection_rate_exceeded") >= 1
        time.sleep(1.1)
        again = PahoClient(port, f"{uid}-again")
        clients.append(again)
        assert again.connect().reason == 0
    finally:
        for client in clients:
            client.close()


def test_publish_rate_slows_the_publisher_without_loss(limited: BrokerProcess, uid: str) -> None:
    subscriber = PahoClient(limited.port, f"{uid}-sub")
    publisher = PahoClient(wait_port(limited, "slow"), f"{uid}-pub")
    try:
        assert subscriber.connect().reason == 0
        assert subscriber.subscribe(f"{uid}/rate", qos=1) == [1]
        # At most 5 unacknowledged: the last batch read (whose debt nobody waits for) is small,
        # so 45 messages at 20/s with a burst of 5 need at least (45 - 5 - 5) / 20 = 1.75 s.
        publisher.client.max_inflight_messages_set(5)
        assert publisher.connect().reason == 0
        started = time.monotonic()
        count = 45
        for n in range(count):
            publisher.publish(f"{uid}/rate", str(n).encode(), qos=1, wait=False)
        got = subscriber.expect(count, timeout=20)
        elapsed = time.monotonic() - started
        assert [m.payload for m in got] == [str(n).encode() for n in range(count)]
        assert elapsed >= 1.5, f"not throttled: {elapsed:.2f}s for {count} at 20/s"
        metrics_port = wait_port(limited, "metrics")
        throttled = metric(metrics_port, "xmq_publish_throttled_total", 'listener="slow"')
        assert throttled >= 1
    finally:
        subscriber.close()
        publisher.close()


def test_subscription_and_topic_limits(limited: BrokerProcess, uid: str) -> None:
    client = PahoClient(limited.port, f"{uid}-subs")
    try:
        assert client.connect().reason == 0
        assert client.subscribe(f"{uid}/a", qos=1) == [1]
        assert client.subscribe(f"{uid}/b", qos=1) == [1]
        assert client.subscribe(f"{uid}/c", qos=1) == [0x97]  # third: quota exceeded
        assert client.subscribe(f"{uid}/a", qos=0) == [0]  # replacing one is fine
        assert client.subscribe("a/b/c/d", qos=1) == [0x8F]  # four levels: filter invalid
        assert client.subscribe("x" * 41, qos=1) == [0x8F]  # too long
        client.publish("a/b/c/d", b"too deep", qos=1, wait=False)
        assert client.disconnects.get(timeout=5).reason == 0x90  # topic name invalid
        metrics_port = wait_port(limited, "metrics")
        label = 'reason="topic_name_invalid"'
        disconnects = metric(metrics_port, "xmq_disconnects_total", label)
        assert disconnects >= 1
    finally:
        client.close()


def test_inflight_limit_holds_the_rest_in_the_queue(limited: BrokerProcess, uid: str) -> None:
    subscriber = RawClient(limited.port)
    publisher = PahoClient(limited.port, f"{uid}-pub")
    try:
        assert subscriber.connect(f"{uid}-slowpoke").reason_code == 0
        subscriber.send_packet(Subscribe(1, [SubscriptionRequest(f"{uid}/q", qos=1)]))
        assert isinstance(subscriber.read_packet(), Suback)
        assert publisher.connect().reason == 0
        for n in range(5):
            assert publisher.publish(f"{uid}/q", str(n).encode(), qos=1) == 0
        first = [subscriber.read_packet(), subscriber.read_packet()]
        with pytest.raises(TimeoutError):
            subscriber.read_packet(timeout=0.5)  # only two in flight without acks
        assert all(isinstance(p, Publish) for p in first)
    finally:
        subscriber.close()
        publisher.close()


def test_broker_wide_connection_limit(start_broker: StartBroker, uid: str) -> None:
    broker = start_broker(
        "limits: {max_connections: 2}\n"
        "listeners:\n"
        "  - {name: mqtt, protocol: tcp}\n"
        "  - {name: other, protocol: tcp, host: 127.0.0.1, port: 0}\n"
    )
    other = wait_port(broker, "other")
    clients = [
        PahoClient(broker.port, f"{uid}-a"),
        PahoClient(other, f"{uid}-b"),
        PahoClient(other, f"{uid}-c"),
        PahoClient(broker.port, f"{uid}-d"),
    ]
    try:
        assert [client.connect().reason for client in clients] == [0, 0, 0x97, 0x97]
    finally:
        for client in clients:
            client.close()


def test_silent_connections_are_dropped(start_broker: StartBroker) -> None:
    broker = start_broker(
        "listeners:\n"
        "  - {name: mqtt, protocol: tcp, connect_timeout_s: 0.5}\n"
        "  - {name: ws, protocol: ws, host: 127.0.0.1, port: 0, connect_timeout_s: 0.5}\n"
    )
    for port in (broker.port, wait_port(broker, "ws")):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            started = time.monotonic()
            with contextlib.suppress(ConnectionResetError):  # abort() may reset
                assert sock.recv(1) == b""  # closed by the broker, nothing sent
            assert 0.3 < time.monotonic() - started < 3
    label = 'listener="mqtt"'
    assert metric(wait_port(broker, "metrics"), "xmq_connect_timeouts_total", label) == 1
