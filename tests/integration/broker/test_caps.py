"""Caps on sessions, retained messages, topic levels and filters: each hit by a real client
over a real socket, answered with its MQTT reason code and counted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.http_probe import metric, wait_port
from tests.support.raw_client import RawClient
from xmq.codec.packets import (
    Disconnect,
    Puback,
    Publish,
    Suback,
    Subscribe,
    SubscriptionRequest,
)
from xmq.codec.properties import Properties

pytestmark = pytest.mark.integration

V311 = 4
CONFIG = """\
mqtt: {max_subscriptions_per_client: 3}
limits: {max_sessions: 6, max_persistent_sessions: 3, max_retained_messages: 3,
         max_retained_bytes: 9000}
"""


@pytest.fixture(scope="module")
def capped() -> Iterator[BrokerProcess]:
    process = BrokerProcess(CONFIG)
    try:
        yield process
    finally:
        process.stop()


def _caps(broker: BrokerProcess, cap: str) -> float:
    return metric(wait_port(broker, "metrics"), "xmq_cap_refusals_total", f'cap="{cap}"')


def _persistent() -> Properties:
    props = Properties()
    props.session_expiry_interval = 600
    return props


def test_session_caps_refuse_with_0x97_and_count(capped: BrokerProcess, uid: str) -> None:
    held: list[RawClient] = []
    try:
        for n in range(3):
            client = RawClient(capped.port)
            ack = client.connect(f"{uid}-p{n}", clean_start=False, properties=_persistent())
            assert ack.reason_code == 0
            held.append(client)
        over = RawClient(capped.port)
        held.append(over)
        assert (
            over.connect(f"{uid}-p3", clean_start=False, properties=_persistent()).reason_code
            == 0x97
        )
        assert _caps(capped, "persistent_sessions") == 1
        # a persistent session already held resumes at the cap
        held[0].send_packet(Disconnect())
        held[0].close()
        again = RawClient(capped.port)
        resumed = again.connect(f"{uid}-p0", clean_start=False, properties=_persistent())
        assert resumed.reason_code == 0 and resumed.session_present
        held[0] = again
        for n in range(3):  # clean sessions up to the total of 6
            client = RawClient(capped.port)
            assert client.connect(f"{uid}-c{n}").reason_code == 0
            held.append(client)
        refused = RawClient(capped.port)
        held.append(refused)
        assert refused.connect(f"{uid}-c3").reason_code == 0x97
        v3 = RawClient(capped.port, version=V311)
        held.append(v3)
        assert v3.connect(f"{uid}-c4").reason_code == 3  # 3.1.1: server unavailable
        assert _caps(capped, "sessions") == 2
        assert metric(wait_port(capped, "metrics"), "xmq_persistent_sessions") == 3
    finally:
        for client in held:
            client.close()


def test_retained_caps_refuse_with_0x97_and_count(capped: BrokerProcess, uid: str) -> None:
    client = RawClient(capped.port)
    client.connect(f"{uid}-r")
    try:

        def publish(topic: str, payload: bytes, packet_id: int) -> int:
            client.send_packet(
                Publish(topic=topic, payload=payload, qos=1, retain=True, packet_id=packet_id)
            )
            ack = client.read_packet()
            assert isinstance(ack, Puback) and ack.packet_id == packet_id
            return ack.reason_code

        assert [publish(f"{uid}/{n}", b"v", n + 1) for n in range(3)] == [0x10, 0x10, 0x10]
        assert publish(f"{uid}/3", b"v", 4) == 0x97  # a fourth topic: count cap
        assert publish(f"{uid}/0", b"new", 5) == 0x10  # replacing one is fine
        assert publish(f"{uid}/0", b"", 6) == 0x10  # so is clearing one
        assert publish(f"{uid}/3", b"x" * 8000, 7) == 0x97  # room by count, not by bytes
        assert publish(f"{uid}/3", b"v", 8) == 0x10
        assert _caps(capped, "retained_messages") == 1
        assert _caps(capped, "retained_bytes") == 1
        client.send_packet(Publish(topic=f"{uid}/9", payload=b"v", qos=0, retain=True))
        ports = wait_port(capped, "metrics")
        assert (
            metric(ports, "xmq_messages_dropped_by_reason_total", 'reason="retained_messages"') == 1
        )
        assert metric(ports, "xmq_retained_messages") == 3
        # MQTT 3.1.1 has no negative PUBACK: the connection is closed instead
        v3 = RawClient(capped.port, version=V311)
        v3.connect(f"{uid}-r3")
        try:
            v3.send_packet(
                Publish(topic=f"{uid}/v3", payload=b"v", qos=1, retain=True, packet_id=1)
            )
            assert v3.read_until_closed() == []
        finally:
            v3.close()
    finally:
        client.close()


def test_topic_levels_and_filters_per_client(capped: BrokerProcess, uid: str) -> None:
    client = RawClient(capped.port)
    client.connect(f"{uid}-f")
    try:
        deep = "/".join(["l"] * 129)  # the default cap is 128 levels
        ok = "/".join(["l"] * 128)
        client.send_packet(Subscribe(1, [SubscriptionRequest(deep, 0), SubscriptionRequest(ok, 0)]))
        suback = client.read_packet()
        assert isinstance(suback, Suback) and suback.reason_codes == [0x8F, 0]
        filters = [SubscriptionRequest(f"{uid}/{n}", 0) for n in range(3)]
        client.send_packet(Subscribe(2, filters))
        suback = client.read_packet()
        assert isinstance(suback, Suback) and suback.reason_codes == [0, 0, 0x97]  # 3 per client
        client.send_packet(Publish(topic=deep, payload=b"v", qos=0))
        [closing] = client.read_until_closed()
        assert isinstance(closing, Disconnect) and closing.reason_code == 0x90
    finally:
        client.close()
    v3 = RawClient(capped.port, version=V311)
    v3.connect(f"{uid}-f3")
    try:
        v3.send_packet(Subscribe(1, [SubscriptionRequest(deep, 0)]))
        suback = v3.read_packet()
        assert isinstance(suback, Suback) and suback.reason_codes == [0x80]
    finally:
        v3.close()
