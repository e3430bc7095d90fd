"""Outbound limits the client sets (Receive Maximum, Maximum Packet Size, Topic Alias Maximum),
message expiry, shared subscriptions and the CONNACK properties the server announces."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient
from xmq.codec.packets import Connack, Puback, Publish, Suback, Subscribe, SubscriptionRequest
from xmq.codec.properties import Properties

StartBroker = Callable[..., BrokerProcess]


def _client(
    port: int, client_id: str, clean: bool = True, **props: int
) -> tuple[RawClient, Connack]:
    raw = RawClient(port)
    properties = Properties()
    for name, value in props.items():
        setattr(properties, name, value)
    ack = raw.connect(client_id, clean_start=clean, properties=properties)
    assert ack.reason_code == 0
    return raw, ack


def _subscribe(raw: RawClient, topic_filter: str, qos: int = 1) -> None:
    raw.send_packet(Subscribe(1, [SubscriptionRequest(topic_filter, qos)]))
    ack = raw.read_packet()
    assert isinstance(ack, Suback)
    assert ack.reason_codes == [qos]


def _publish(raw: RawClient, topic: str, payload: bytes, packet_id: int, **props: int) -> None:
    properties = None
    if props:
        properties = Properties()
        for name, value in props.items():
            setattr(properties, name, value)
    raw.send_packet(Publish(topic, payload, qos=1, packet_id=packet_id, properties=properties))
    assert isinstance(raw.read_packet(), Puback)


def _publishes(raw: RawClient, wait: float) -> list[Publish]:
    got: list[Publish] = []
    while True:
        try:
            packet = raw.read_packet(timeout=wait)
        except TimeoutError:
            return got
        assert isinstance(packet, Publish), packet
        got.append(packet)


@pytest.mark.spec("5:MQTT-3.3.4-9", "5:MQTT-4.9.0-2", "5:MQTT-2.2.1-4", "5:MQTT-4.3.2-1")
def test_client_receive_maximum_is_honoured(broker: BrokerProcess, uid: str) -> None:
    sub, _ = _client(broker.port, f"{uid}-s", receive_maximum=2)
    pub, _ = _client(broker.port, f"{uid}-p")
    try:
        _subscribe(sub, f"{uid}/t")
        for n in range(5):
            _publish(pub, f"{uid}/t", f"{n}".encode(), n + 1)
        first = _publishes(sub, 0.5)
        assert [p.payload for p in first] == [b"0", b"1"]
        sub.send_packet(Puback(first[0].packet_id))
        more = _publishes(sub, 0.5)
        assert [p.payload for p in more] == [b"2"]
        for packet in (first[1], more[0]):
            sub.send_packet(Puback(packet.packet_id))
        rest = _publishes(sub, 0.5)
        assert [p.payload for p in rest] == [b"3", b"4"]
        ids = {p.packet_id for p in first + more + rest}
        assert len(ids) >= 3  # in-flight ids are never reused while in flight
    finally:
        sub.close()
        pub.close()


@pytest.mark.spec("5:MQTT-3.1.2-24", "5:MQTT-3.1.2-25")
def test_oversize_messages_are_skipped_for_that_client(broker: BrokerProcess, uid: str) -> None:
    small, _ = _client(broker.port, f"{uid}-small", maximum_packet_size=100)
    pub, _ = _client(broker.port, f"{uid}-p")
    try:
        _subscribe(small, f"{uid}/t")
        _publish(pub, f"{uid}/t", b"x" * 500, 1)
        _publish(pub, f"{uid}/t", b"fits", 2)
        got = _publishes(small, 0.5)
        assert [p.payload for p in got] == [b"fits"]
    finally:
        small.close()
        pub.close()


def test_outbound_topic_aliases(broker: BrokerProcess, uid: str) -> None:
    sub, _ = _client(broker.port, f"{uid}-s", topic_alias_maximum=4)
    pub, _ = _client(broker.port, f"{uid}-p")
    try:
        _subscribe(sub, f"{uid}/t")
        _publish(pub, f"{uid}/t", b"1", 1)
        _publish(pub, f"{uid}/t", b"2", 2)
        first, second = _publishes(sub, 0.5)
        assert first.topic == f"{uid}/t"
        assert first.properties is not None and first.properties.topic_alias
        assert second.topic == ""
        assert second.properties is not None
        assert second.properties.topic_alias == first.properties.topic_alias
    finally:
        sub.close()
        pub.close()


@pytest.mark.spec("5:MQTT-3.3.2-5", "5:MQTT-3.3.2-6")
def test_message_expiry_in_queue(broker: BrokerProcess, uid: str) -> None:
    sub, _ = _client(broker.port, f"{uid}-s", session_expiry_interval=60)
    _subscribe(sub, f"{uid}/t")
    sub.close()
    time.sleep(0.3)
    pub, _ = _client(broker.port, f"{uid}-p")
    try:
        _publish(pub, f"{uid}/t", b"short", 1, message_expiry_interval=1)
        _publish(pub, f"{uid}/t", b"long", 2, message_expiry_interval=100)
        time.sleep(1.5)
        again, ack = _client(broker.port, f"{uid}-s", clean=False, session_expiry_interval=60)
        assert ack.session_present
        got = _publishes(again, 0.5)
        assert [p.payload for p in got] == [b"long"]
        props = got[0].properties
        assert props is not None and props.message_expiry_interval is not None
        assert props.message_expiry_interval < 100
        again.close()
    finally:
        pub.close()


def test_connack_announces_limits(start_broker: StartBroker, uid: str) -> None:
    broker = start_broker(XMQ_MQTT__MAX_KEEPALIVE_S="10", XMQ_MQTT__RECEIVE_MAXIMUM="77")
    raw = RawClient(broker.port)
    try:
        props = Properties()
        props.request_response_information = 1
        ack = raw.connect(uid, keep_alive=100, properties=props)
        assert ack.properties is not None
        assert ack.properties.server_keep_alive == 10
        assert ack.properties.receive_maximum == 77
        assert ack.properties.response_information
    finally:
        raw.close()


def test_shared_subscription_round_robin_and_redispatch(broker: BrokerProcess, uid: str) -> None:
    one, _ = _client(broker.port, f"{uid}-1")
    two, _ = _client(broker.port, f"{uid}-2")
    pub, _ = _client(broker.port, f"{uid}-p")
    try:
        _subscribe(one, f"$share/g/{uid}/t")
        _subscribe(two, f"$share/g/{uid}/t")
        for n in range(10):
            _publish(pub, f"{uid}/t", f"{n}".encode(), n + 1)
        got_one = _publishes(one, 0.5)
        got_two = _publishes(two, 0.3)
        assert len(got_one) == 5 and len(got_two) == 5
        assert sorted(p.payload for p in got_one + got_two) == sorted(
            f"{n}".encode() for n in range(10)
        )
        # `one` leaves without acknowledging: its 5 messages go to `two`
        for packet in got_two:
            two.send_packet(Puback(packet.packet_id))
        one.close()
        redelivered = _publishes(two, 1.0)
        assert sorted(p.payload for p in redelivered) == sorted(p.payload for p in got_one)
    finally:
        two.close()
        pub.close()
