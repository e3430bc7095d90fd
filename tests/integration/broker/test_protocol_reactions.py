"""Malformed and protocol-violating input gets the right reason code and a closed connection.

Driven with raw bytes and xmq.codec packets so that the exact reaction can be checked.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient, closing_reason, connected
from xmq.codec.packets import (
    Connack,
    Connect,
    Disconnect,
    Puback,
    Publish,
    Pubrec,
    Suback,
    Subscribe,
    SubscriptionRequest,
)
from xmq.codec.properties import Properties
from xmq.codec.writer import encode

StartBroker = Callable[..., BrokerProcess]


@pytest.mark.spec("5:MQTT-3.1.0-1")
def test_first_packet_must_be_connect(broker: BrokerProcess) -> None:
    raw = RawClient(broker.port)
    try:
        raw.send(b"\xc0\x00")  # PINGREQ
        assert raw.read_until_closed() == []
    finally:
        raw.close()


@pytest.mark.spec("3:MQTT-3.1.2-2", "3:MQTT-3.2.2-5")
def test_unsupported_protocol_level_gets_connack_0x01(broker: BrokerProcess) -> None:
    raw = RawClient(broker.port, version=4)
    try:
        # CONNECT "MQTT" level 9, clean session, keep alive 60, client id "x"
        raw.send(b"\x10\x0d\x00\x04MQTT\x09\x02\x00\x3c\x00\x01x")
        packets = raw.read_until_closed()
        assert len(packets) == 1
        assert isinstance(packets[0], Connack)
        assert packets[0].reason_code == 0x01
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-3.1.2-3", "5:MQTT-3.1.4-1", "5:MQTT-3.2.2-7")
def test_malformed_connect_is_refused_and_closed(broker: BrokerProcess) -> None:
    raw = RawClient(broker.port)
    try:
        # CONNECT v5 whose reserved flag bit 0 is set: malformed
        raw.send(b"\x10\x0e\x00\x04MQTT\x05\x03\x00\x3c\x00\x00\x01x")
        packets = raw.read_until_closed()
        assert all(isinstance(p, Connack) and p.reason_code >= 0x80 for p in packets)
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-3.1.0-2")
def test_second_connect_is_a_protocol_error(broker: BrokerProcess, uid: str) -> None:
    raw = connected(broker.port, uid)
    try:
        raw.send_packet(Connect(client_id=uid))
        assert closing_reason(raw) == 0x82
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-3.3.1-4", "5:MQTT-4.13.1-1")
def test_qos3_publish_is_malformed(broker: BrokerProcess, uid: str) -> None:
    raw = connected(broker.port, uid)
    try:
        raw.send(b"\x36\x06\x00\x01a\x00\x01\x00")
        assert closing_reason(raw) == 0x81
    finally:
        raw.close()


@pytest.mark.spec("3:MQTT-3.3.1-4", "3:MQTT-4.8.0-1")
def test_mqtt311_violation_closes_without_disconnect(broker: BrokerProcess, uid: str) -> None:
    raw = connected(broker.port, uid, version=4)
    try:
        raw.send(b"\x36\x05\x00\x01a\x00\x01")
        assert raw.read_until_closed() == []
    finally:
        raw.close()


def test_packet_too_large(start_broker: StartBroker, uid: str) -> None:
    broker = start_broker(XMQ_MQTT__MAX_PACKET_SIZE="1024")
    raw = connected(broker.port, uid)
    try:
        raw.send_packet(Publish(f"{uid}/big", b"x" * 2000, qos=0))
        assert closing_reason(raw) == 0x95
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-3.3.4-7")
def test_receive_maximum_exceeded(start_broker: StartBroker, uid: str) -> None:
    broker = start_broker(XMQ_MQTT__RECEIVE_MAXIMUM="2")
    raw = connected(broker.port, uid)
    try:
        for packet_id in (1, 2, 3):  # QoS 2, never released
            raw.send_packet(Publish(f"{uid}/t", b"x", qos=2, packet_id=packet_id))
        packets = raw.read_until_closed()
        assert [type(p) for p in packets[:2]] == [Pubrec, Pubrec]
        assert isinstance(packets[-1], Disconnect)
        assert packets[-1].reason_code == 0x93
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-3.3.2-8", "5:MQTT-3.3.2-9")
@pytest.mark.parametrize(
    ("topic", "alias", "reason"),
    [("t", 0, 0x94), ("t", 1000, 0x94), ("", 7, 0x82)],
    ids=["alias-zero", "alias-above-maximum", "unknown-alias"],
)
def test_topic_alias_errors(
    broker: BrokerProcess, uid: str, topic: str, alias: int, reason: int
) -> None:
    raw = connected(broker.port, uid)
    try:
        props = Properties()
        props.topic_alias = alias
        raw.send_packet(Publish(topic, b"x", qos=0, properties=props))
        assert closing_reason(raw) == reason
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-3.3.2-12")
def test_topic_alias_inbound_resolves(broker: BrokerProcess, uid: str) -> None:
    sub = connected(broker.port, f"{uid}-s")
    pub = connected(broker.port, f"{uid}-p")
    try:
        sub.send_packet(Subscribe(1, [SubscriptionRequest(f"{uid}/a", 1)]))
        assert isinstance(sub.read_packet(), Suback)
        props = Properties()
        props.topic_alias = 3
        pub.send_packet(Publish(f"{uid}/a", b"1", qos=1, packet_id=1, properties=props))
        again = Properties()
        again.topic_alias = 3
        pub.send_packet(Publish("", b"2", qos=1, packet_id=2, properties=again))
        got = [sub.read_packet(), sub.read_packet()]
        assert [(p.topic, p.payload) for p in got if isinstance(p, Publish)] == [
            (f"{uid}/a", b"1"),
            (f"{uid}/a", b"2"),
        ]
    finally:
        sub.close()
        pub.close()


@pytest.mark.spec("5:MQTT-3.3.2-2", "5:MQTT-4.7.0-1")
def test_wildcard_in_topic_name(broker: BrokerProcess, uid: str) -> None:
    raw = connected(broker.port, uid)
    try:
        raw.send_packet(Publish(f"{uid}/+", b"x", qos=0))
        assert closing_reason(raw) == 0x90
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-3.3.4-6")
def test_subscription_identifier_in_publish(broker: BrokerProcess, uid: str) -> None:
    raw = connected(broker.port, uid)
    try:
        props = Properties()
        props.subscription_identifiers = [5]
        raw.send_packet(Publish(f"{uid}/t", b"x", qos=0, properties=props))
        assert closing_reason(raw) == 0x82
    finally:
        raw.close()


def test_payload_format_invalid(broker: BrokerProcess, uid: str) -> None:
    raw = connected(broker.port, uid)
    try:
        props = Properties()
        props.payload_format_indicator = 1
        raw.send_packet(Publish(f"{uid}/t", b"\xff\xfe", qos=1, packet_id=9, properties=props))
        ack = raw.read_packet()
        assert isinstance(ack, Puback)
        assert (ack.packet_id, ack.reason_code) == (9, 0x99)
    finally:
        raw.close()


@pytest.mark.spec(
    "5:MQTT-4.7.1-1",
    "5:MQTT-4.8.2-1",
    "5:MQTT-3.8.3-4",
    "5:MQTT-3.8.4-6",
    "5:MQTT-3.9.3-1",
)
def test_invalid_filters_and_shared_no_local(broker: BrokerProcess, uid: str) -> None:
    raw = connected(broker.port, uid)
    try:
        raw.send_packet(
            Subscribe(
                1,
                [
                    SubscriptionRequest(f"{uid}/#/x", 1),
                    SubscriptionRequest(f"{uid}/ok", 2),
                    SubscriptionRequest("$share//x", 1),
                ],
            )
        )
        ack = raw.read_packet()
        assert isinstance(ack, Suback)
        assert ack.reason_codes == [0x8F, 2, 0x8F]
        raw.send_packet(Subscribe(2, [SubscriptionRequest(f"$share/g/{uid}", 1, no_local=True)]))
        assert closing_reason(raw) == 0x82
    finally:
        raw.close()


def test_reserved_topics_are_not_writable(broker: BrokerProcess, uid: str) -> None:
    raw = connected(broker.port, uid)
    try:
        raw.send_packet(Publish("$SYS/broker/fake", b"x", qos=1, packet_id=4))
        ack = raw.read_packet()
        assert isinstance(ack, Puback)
        assert ack.reason_code == 0x87
    finally:
        raw.close()


def test_no_matching_subscribers_reason(broker: BrokerProcess, uid: str) -> None:
    raw = connected(broker.port, uid)
    try:
        raw.send_packet(Publish(f"{uid}/nobody", b"x", qos=1, packet_id=4))
        ack = raw.read_packet()
        assert isinstance(ack, Puback)
        assert ack.reason_code == 0x10
    finally:
        raw.close()


@pytest.mark.spec("3:MQTT-3.1.2-3", "3:MQTT-3.1.4-1")
def test_malformed_mqtt311_connect_is_closed_without_connack(broker: BrokerProcess) -> None:
    raw = RawClient(broker.port, version=4)
    try:
        # CONNECT 3.1.1 with the reserved flag bit set
        raw.send(b"\x10\x0d\x00\x04MQTT\x04\x03\x00\x3c\x00\x01x")
        assert raw.read_until_closed() == []
    finally:
        raw.close()


def test_packets_before_a_malformed_one_are_processed(broker: BrokerProcess, uid: str) -> None:
    sub = connected(broker.port, f"{uid}-s")
    pub = connected(broker.port, f"{uid}-p")
    try:
        sub.send_packet(Subscribe(1, [SubscriptionRequest(f"{uid}/t", 0)]))
        assert isinstance(sub.read_packet(), Suback)
        good = Publish(f"{uid}/t", b"before", qos=0)
        pub.send(encode(good, 5) + b"\x36\x06\x00\x01a\x00\x01\x00")  # then QoS 3: malformed
        assert closing_reason(pub) == 0x81
        delivered = sub.read_packet()
        assert isinstance(delivered, Publish) and delivered.payload == b"before"
    finally:
        sub.close()
        pub.close()
