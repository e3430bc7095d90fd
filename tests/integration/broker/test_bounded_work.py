"""Bounded work per loop turn, against a real broker over real sockets: the abusive
SUBSCRIBE, the one-read flood and the one PUBLISH to 20,000 sessions of issue 13, with the
event-loop stall read from /metrics."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from bench.abuse_clients import park_sessions
from tests.support.broker_process import BrokerProcess
from tests.support.http_probe import http, metric, wait_port
from tests.support.raw_client import RawClient
from xmq.codec.packets import (
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Puback,
    Publish,
    Suback,
    Subscribe,
    SubscriptionRequest,
)
from xmq.codec.properties import Properties
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode

pytestmark = pytest.mark.integration

MAX_STALL_S = 1.0
"""Generous for a loaded test machine; the unsliced code stalled for seconds on these."""


@pytest.fixture
def broker(start_broker: Callable[..., BrokerProcess]) -> BrokerProcess:
    """A broker of its own: each test counts the retained messages it gets."""
    return start_broker()


def _stall(process: BrokerProcess) -> float:
    return metric(wait_port(process, "metrics"), "xmq_event_loop_lag_max_seconds")


def _wait_metric(process: BrokerProcess, name: str, value: float, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    port = wait_port(process, "metrics")
    while metric(port, name) < value:
        assert time.monotonic() < deadline, f"{name} never reached {value}"
        time.sleep(0.1)


def _retain(process: BrokerProcess, topics: list[str]) -> None:
    publisher = RawClient(process.port)
    publisher.connect("retainer")
    publisher.send(
        b"".join(
            encode(Publish(topic=topic, payload=b"r", qos=0, retain=True), 5) for topic in topics
        )
    )
    _wait_metric(process, "xmq_retained_messages", len(topics))
    publisher.close()


def _read_publishes(client: RawClient, count: int, timeout: float = 60) -> list[Publish]:
    found: list[Publish] = []
    while len(found) < count:
        packet = client.read_packet(timeout)
        assert packet is not None, f"closed after {len(found)} messages"
        if isinstance(packet, Publish):
            found.append(packet)
    return found


def _pinger(process: BrokerProcess) -> RawClient:
    client = RawClient(process.port)
    client.connect("well-behaved")
    return client


def _ping_time(client: RawClient) -> float:
    started = time.monotonic()
    client.send_packet(Pingreq())
    assert isinstance(client.read_packet(30), Pingresp)
    return time.monotonic() - started


def test_one_write_of_a_mebibyte_of_tiny_packets_is_decoded_a_slice_per_turn(
    broker: BrokerProcess,
) -> None:
    """Reads of up to 256 KiB (131,072 PINGREQs) decoded as they are handled: every packet is
    answered, in order, and other clients are served meanwhile. (How many packets a turn
    decodes is counted by tests/unit/net/test_read_decoding.py; the CPU of the longest turn
    is measured by bench/read_slice_stall.py, not asserted here.)"""
    port = wait_port(broker, "metrics")
    pinger = _pinger(broker)
    flooder = RawClient(broker.port)
    flooder.connect("flood")
    pings = encode(Pingreq(), 5) * 1023
    flood = b"".join(
        pings + encode(Publish(topic="t", payload=b"", qos=1, packet_id=n), 5)
        for n in range(1, 513)
    )
    assert len(flood) > 1 << 20  # four reads of the broker's socket at least
    expected = [*([Pingresp] * 1023), Puback] * 512
    sender = threading.Thread(target=flooder.send, args=(flood,))
    sender.start()  # the answers are read meanwhile
    waits = [_ping_time(pinger) for _ in range(3)]  # served while the flood is handled
    answers: list[Packet] = []
    reader = PacketReader(protocol_version=5)
    flooder.sock.settimeout(60)
    while len(answers) < len(expected):
        chunk = flooder.sock.recv(1 << 20)
        assert chunk, f"closed after {len(answers)} answers"
        answers += reader.feed(chunk)
    sender.join()
    assert [type(p) for p in answers] == expected  # every packet answered, in order
    assert [p.packet_id for p in answers if isinstance(p, Puback)] == list(range(1, 513))
    assert max(waits) < MAX_STALL_S
    assert http(port, "/healthz")[0] == 200
    flooder.close()
    pinger.close()


def test_subscribe_listing_hash_a_thousand_times_against_5000_retained(
    broker: BrokerProcess,
) -> None:
    topics = [f"r/{n % 50}/{n:05d}" for n in range(5000)]
    _retain(broker, topics)
    before = _stall(broker)
    client = RawClient(broker.port)
    client.connect("abuser")
    client.send_packet(Subscribe(1, [SubscriptionRequest("#", 0)] * 1000))
    suback = client.read_packet()
    assert isinstance(suback, Suback) and suback.reason_codes == [0] * 1000
    publishes = _read_publishes(client, 5000)
    assert sorted(p.topic for p in publishes) == sorted(topics)  # each once
    assert all(p.retain for p in publishes)
    client.send_packet(Pingreq())
    assert isinstance(client.read_packet(), Pingresp)  # and nothing more came
    assert _stall(broker) < max(MAX_STALL_S, before)
    assert http(wait_port(broker, "metrics"), "/healthz")[0] == 200
    client.close()


def test_deep_retained_topics_are_refused_and_hash_200_times_stays_cheap(
    broker: BrokerProcess,
) -> None:
    client = RawClient(broker.port)
    client.connect("deep")
    client.send_packet(Publish(topic="/".join(["d"] * 1000), payload=b"r", qos=0, retain=True))
    [closing] = client.read_until_closed()
    assert isinstance(closing, Disconnect) and closing.reason_code == 0x90
    client.close()
    deepest = [("/".join(["d"] * 126)) + f"/{n}" for n in range(200)]  # 127 levels: allowed
    _retain(broker, deepest)
    client = RawClient(broker.port)
    client.connect("abuser")
    client.send_packet(Subscribe(1, [SubscriptionRequest("#", 0)] * 200))
    assert isinstance(client.read_packet(), Suback)
    assert len(_read_publishes(client, 200)) == 200
    assert _stall(broker) < MAX_STALL_S
    client.close()


def test_one_read_of_3000_qos1_publishes_to_500_offline_sessions(broker: BrokerProcess) -> None:
    props = Properties()
    props.session_expiry_interval = 600
    for n in range(500):
        offline = RawClient(broker.port)
        offline.connect(f"offline-{n}", clean_start=False, properties=props)
        offline.send_packet(Subscribe(1, [SubscriptionRequest("bcast/#", 1)]))
        assert isinstance(offline.read_packet(), Suback)
        offline.send_packet(Disconnect())
        offline.close()
    pinger = _pinger(broker)
    publisher = RawClient(broker.port)
    publisher.connect("flood")
    flood = b"".join(
        encode(Publish(topic="bcast/x", payload=b"1", qos=1, packet_id=n), 5)
        for n in range(1, 3001)
    )
    assert len(flood) <= 65_536  # one read of the broker's socket
    publisher.send(flood)
    pings = [_ping_time(pinger) for _ in range(3)]  # served while the flood is routed
    acks: list[int] = []
    while len(acks) < 3000:
        packet = publisher.read_packet(60)
        assert isinstance(packet, Puback), packet
        acks.append(packet.packet_id)
    assert acks == list(range(1, 3001))  # every PUBACK, in order, after its routing
    assert _stall(broker) < MAX_STALL_S
    assert max(pings) < MAX_STALL_S
    port = wait_port(broker, "metrics")
    assert metric(port, "xmq_deliveries_routed_total") >= 1_500_000
    assert http(port, "/healthz")[0] == 200
    publisher.close()
    pinger.close()


def test_a_ping_is_answered_while_one_publish_fans_out_to_20000_sessions(
    broker: BrokerProcess,
) -> None:
    sessions = 20_000
    assert asyncio.run(park_sessions(broker.port, "offline-", "bcast/#", sessions)) == {0: sessions}
    pinger = _pinger(broker)
    publisher = RawClient(broker.port)
    publisher.connect("fan-out")
    publisher.send_packet(Publish(topic="bcast/x", payload=b"1", qos=1, packet_id=1))
    answered = 0  # pings answered before the PUBACK, which comes after the last slice
    while publisher.read_nothing(0.001):
        _ping_time(pinger)
        answered += 1
    ack = publisher.read_packet(60)
    assert isinstance(ack, Puback) and ack.packet_id == 1 and ack.reason_code == 0
    assert answered >= 3  # the unsliced fan-out answered none: it held the loop throughout
    port = wait_port(broker, "metrics")
    assert metric(port, "xmq_deliveries_routed_total") >= sessions
    assert http(port, "/healthz")[0] == 200
    publisher.close()
    pinger.close()
