"""PUBLISH property rules, honest acknowledgement reason codes and message expiry, end to end.

Raw packets where a client library refuses to send the bad thing; a real broker process.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.http_probe import metric, wait_port
from tests.support.raw_client import RawClient, connected, disconnect_reason_for, subscribed
from xmq.codec.packets import (
    MQTT_5,
    Disconnect,
    Puback,
    Publish,
    Pubrec,
)
from xmq.codec.properties import Properties
from xmq.codec.writer import encode

pytestmark = pytest.mark.integration

StartBroker = Callable[..., BrokerProcess]


@pytest.mark.spec("5:MQTT-3.3.2-14", "5:MQTT-4.7.3-1")
@pytest.mark.parametrize("response_topic", ["reply/+", "reply/#", "#", "a/+/b", ""])
def test_response_topic_with_wildcards_is_a_protocol_error(
    broker: BrokerProcess, uid: str, response_topic: str
) -> None:
    """[MQTT-3.3.2-14] The Response Topic MUST NOT contain wildcard characters; it is a Topic
    Name, so it is one character long at least [MQTT-4.7.3-1]."""
    props = Properties(response_topic=response_topic, correlation_data=b"c")
    publish = encode(Publish(f"{uid}/req", b"x", qos=1, packet_id=3, properties=props), MQTT_5)
    assert disconnect_reason_for(broker.port, uid, publish) == 0x82


@pytest.mark.spec(
    "5:MQTT-3.3.1-2",
    "5:MQTT-3.3.2-1",
    "5:MQTT-1.5.4-1",
    "5:MQTT-1.5.4-2",
    "5:MQTT-2.2.1-3",
    "5:MQTT-3.3.2-13",
    "5:MQTT-3.8.1-1",
    "5:MQTT-3.8.3-1",
    "5:MQTT-3.8.3-2",
    "5:MQTT-3.8.3-5",
    "5:MQTT-3.10.1-1",
    "5:MQTT-3.10.3-2",
)
@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x38\x05\x00\x01t\x00x", 0x81),  # [MQTT-3.3.1-2] DUP set on QoS 0
        (b"\x30\x06\x00\x02\xff\xfe\x00x", 0x81),  # [MQTT-3.3.2-1] [MQTT-1.5.4-1] not UTF-8
        (b"\x30\x06\x00\x02a\x00\x00x", 0x81),  # [MQTT-1.5.4-2] U+0000 in the topic
        (b"\x32\x06\x00\x01t\x00\x00\x00", 0x81),  # [MQTT-2.2.1-3] QoS 1 with packet id 0
        (b"\x30\x09\x00\x01t\x04\x08\x00\x01\xffx", 0x81),  # [MQTT-3.3.2-13] not UTF-8
        (b"\x30\x07\x00\x01t\x02\x01\x02x", 0x82),  # Payload Format Indicator 2
        (b"\x30\x0d\x00\x01t\x08\x08\x00\x01a\x08\x00\x01bx", 0x82),  # Response Topic twice
        (b"\x30\x0d\x00\x01t\x08\x03\x00\x01a\x03\x00\x01bx", 0x82),  # Content Type twice
        (b"\x30\x0d\x00\x01t\x08\x09\x00\x01a\x09\x00\x01bx", 0x82),  # Correlation twice
        (b"\x80\x07\x00\x01\x00\x00\x01t\x00", 0x81),  # [MQTT-3.8.1-1] SUBSCRIBE flags
        (b"\x82\x03\x00\x01\x00", 0x82),  # [MQTT-3.8.3-2] SUBSCRIBE without a filter
        (b"\x82\x07\x00\x01\x00\x00\x01t\xc0", 0x81),  # [MQTT-3.8.3-5] reserved bits
        (b"\x82\x07\x00\x01\x00\x00\x01t\x30", 0x82),  # Retain Handling 3
        (b"\x82\x07\x00\x01\x00\x00\x01t\x03", 0x82),  # Maximum QoS 3 requested
        (b"\x82\x09\x00\x01\x02\x0b\x00\x00\x01t\x00", 0x82),  # Subscription Identifier 0
        (b"\x82\x0b\x00\x01\x04\x0b\x01\x0b\x02\x00\x01t\x00", 0x82),  # identifier twice
        (b"\x82\x07\x00\x00\x00\x00\x01t\x00", 0x81),  # [MQTT-2.2.1-3] packet id 0
        (b"\x82\x07\x00\x01\x00\x00\x01\xff\x00", 0x81),  # [MQTT-3.8.3-1] filter not UTF-8
        (b"\xa0\x06\x00\x01\x00\x00\x01t", 0x81),  # [MQTT-3.10.1-1] UNSUBSCRIBE flags
        (b"\xa2\x03\x00\x01\x00", 0x82),  # [MQTT-3.10.3-2] UNSUBSCRIBE without a filter
    ],
    ids=[
        "dup-on-qos0",
        "topic-not-utf8",
        "topic-nul",
        "publish-packet-id-0",
        "response-topic-not-utf8",
        "payload-format-2",
        "response-topic-twice",
        "content-type-twice",
        "correlation-data-twice",
        "subscribe-flags",
        "subscribe-empty",
        "subscribe-reserved-bits",
        "retain-handling-3",
        "subscribe-qos-3",
        "subscription-identifier-0",
        "subscription-identifier-twice",
        "subscribe-packet-id-0",
        "filter-not-utf8",
        "unsubscribe-flags",
        "unsubscribe-empty",
    ],
)
def test_publish_and_subscribe_rules(
    broker: BrokerProcess, uid: str, data: bytes, reason: int
) -> None:
    """Bad PUBLISH / SUBSCRIBE / UNSUBSCRIBE bytes: DISCONNECT with the reason, then closed
    (0x81 Malformed Packet, 0x82 Protocol Error)."""
    assert disconnect_reason_for(broker.port, uid, data) == reason


@pytest.mark.spec("5:MQTT-3.3.2-15", "5:MQTT-3.3.2-16")
def test_response_topic_and_correlation_data_are_forwarded(broker: BrokerProcess, uid: str) -> None:
    """[MQTT-3.3.2-15] [MQTT-3.3.2-16] forwarded unaltered to the subscribers."""
    sub = connected(broker.port, f"{uid}-s")
    pub = connected(broker.port, f"{uid}-p")
    try:
        subscribed(sub, f"{uid}/req", 1)
        props = Properties(response_topic=f"{uid}/reply/1", correlation_data=b"\x00corr")
        pub.send_packet(Publish(f"{uid}/req", b"x", qos=1, packet_id=3, properties=props))
        ack = pub.read_packet()
        assert isinstance(ack, Puback) and ack.reason_code == 0
        got = sub.read_packet()
        assert isinstance(got, Publish) and got.properties is not None
        assert got.properties.response_topic == f"{uid}/reply/1"
        assert got.properties.correlation_data == b"\x00corr"
    finally:
        sub.close()
        pub.close()


def _ack(packet: object) -> tuple[str, int, int]:
    assert isinstance(packet, (Puback, Pubrec)), packet
    return type(packet).__name__, packet.packet_id, packet.reason_code


def _dropped(broker: BrokerProcess, reason: str) -> float:
    return metric(
        wait_port(broker, "metrics"), "xmq_messages_dropped_by_reason_total", f'reason="{reason}"'
    )


@pytest.mark.spec("5:MQTT-4.3.3-9")
def test_full_queue_of_an_offline_subscriber_is_quota_exceeded(
    start_broker: StartBroker, uid: str
) -> None:
    """A QoS 1/2 PUBLISH all of whose deliveries were dropped for a full queue is acknowledged
    0x97 Quota exceeded, not 0x10 No matching subscribers; every drop is counted."""
    broker = start_broker("limits: {max_queued_messages: 1}\n")
    offline = RawClient(broker.port)
    ack = offline.connect(
        f"{uid}-off", clean_start=True, properties=Properties(session_expiry_interval=300)
    )
    assert ack.reason_code == 0
    subscribed(offline, f"{uid}/t", 2)
    offline.send_packet(Disconnect(0))
    offline.close()
    pub = connected(broker.port, f"{uid}-p")
    try:
        pub.send_packet(Publish(f"{uid}/t", b"1", qos=1, packet_id=1))  # queued
        pub.send_packet(Publish(f"{uid}/t", b"2", qos=1, packet_id=2))  # queue full
        pub.send_packet(Publish(f"{uid}/t", b"3", qos=2, packet_id=3))  # queue full
        acks = [_ack(pub.read_packet()) for _ in range(3)]
        assert acks == [("Puback", 1, 0), ("Puback", 2, 0x97), ("Pubrec", 3, 0x97)]
        # PUBREC >= 0x80 ended that QoS 2 exchange: the id is free again, not "re-sent"
        pub.send_packet(Publish(f"{uid}/nobody", b"4", qos=2, packet_id=3))
        again = pub.read_packet()
        assert isinstance(again, Pubrec) and again.reason_code == 0x10
        assert _dropped(broker, "queue_full") == 2
    finally:
        pub.close()


def test_slow_subscriber_with_a_full_queue(start_broker: StartBroker, uid: str) -> None:
    """An online subscriber that never acknowledges (Receive Maximum 1, queue of 1)."""
    broker = start_broker("limits: {max_queued_messages: 1}\n")
    slow = connected(broker.port, f"{uid}-slow", properties=Properties(receive_maximum=1))
    fast = connected(broker.port, f"{uid}-fast")
    pub = connected(broker.port, f"{uid}-p")
    v311 = connected(broker.port, f"{uid}-p4", version=4)
    try:
        subscribed(slow, f"{uid}/t", 1)
        for n in (1, 2, 3):
            pub.send_packet(Publish(f"{uid}/t", b"%d" % n, qos=1, packet_id=n))
            ack = pub.read_packet()
            assert isinstance(ack, Puback)
            assert ack.reason_code == (0 if n < 3 else 0x97), n  # in flight, queued, dropped
        v311.send_packet(Publish(f"{uid}/t", b"4", qos=1, packet_id=9))
        ack = v311.read_packet()
        assert isinstance(ack, Puback) and ack.packet_id == 9  # 3.1.1: no reason code to give
        assert _dropped(broker, "queue_full") == 2
        # one matching subscriber that takes it: success, though the slow one drops it
        subscribed(fast, f"{uid}/t", 1)
        pub.send_packet(Publish(f"{uid}/t", b"5", qos=1, packet_id=5))
        ack = pub.read_packet()
        assert isinstance(ack, Puback) and ack.reason_code == 0
        assert _dropped(broker, "queue_full") == 3
    finally:
        for raw in (slow, fast, pub, v311):
            raw.close()


@pytest.mark.spec("5:MQTT-3.3.2-6")
def test_forwarded_message_expiry_never_exceeds_the_sent_one(
    broker: BrokerProcess, uid: str
) -> None:
    """[MQTT-3.3.2-6] The interval a subscriber receives is the sent one minus time spent
    waiting: never larger (it used to be 3601 for 3600 in about one message in seven)."""
    sub = connected(broker.port, f"{uid}-s")
    pub = connected(broker.port, f"{uid}-p")
    try:
        subscribed(sub, f"{uid}/#", 0)
        sent = {f"{uid}/a": 3600, f"{uid}/b": 60}
        for n in range(300):
            topic = f"{uid}/a" if n % 2 else f"{uid}/b"
            props = Properties(message_expiry_interval=sent[topic])
            pub.send_packet(Publish(topic, b"x", qos=0, properties=props))
        for _ in range(300):
            got = sub.read_packet()
            assert isinstance(got, Publish) and got.properties is not None
            interval = got.properties.message_expiry_interval
            assert interval is not None and sent[got.topic] - 2 <= interval <= sent[got.topic]
    finally:
        sub.close()
        pub.close()
