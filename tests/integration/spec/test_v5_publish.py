"""MQTT 5.0 PUBLISH, QoS flows, retained messages, topic aliases and topics on a real socket."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import (
    RawClient,
    closing_reason,
    connected,
    disconnect_reason_for,
    next_publish,
    resumable,
    subscribed,
)
from xmq.codec.packets import (
    Disconnect,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    SubscriptionRequest,
)
from xmq.codec.properties import Properties

pytestmark = pytest.mark.integration

StartBroker = Callable[..., BrokerProcess]


def _publish(raw: RawClient, topic: str, payload: bytes, qos: int = 0, **options: object) -> None:
    raw.send_packet(Publish(topic, payload, qos=qos, **options))  # type: ignore[arg-type]


@pytest.mark.spec(
    "5:MQTT-3.3.4-1", "5:MQTT-4.3.2-4", "5:MQTT-4.3.3-8", "5:MQTT-4.3.3-11", "5:MQTT-2.2.1-5"
)
def test_each_qos_is_answered_as_it_requires(broker: BrokerProcess, uid: str) -> None:
    raw = connected(broker.port, uid)
    try:
        _publish(raw, f"{uid}/t", b"0", 0)
        _publish(raw, f"{uid}/t", b"1", 1, packet_id=0x1234)
        _publish(raw, f"{uid}/t", b"2", 2, packet_id=0x4321)
        puback, pubrec = raw.read_packet(), raw.read_packet()
        assert isinstance(puback, Puback) and puback.packet_id == 0x1234
        assert isinstance(pubrec, Pubrec) and pubrec.packet_id == 0x4321
        raw.send_packet(Pubrel(0x4321))
        pubcomp = raw.read_packet()
        assert isinstance(pubcomp, Pubcomp) and pubcomp.packet_id == 0x4321
        assert raw.read_nothing(0.2)  # nothing for the QoS 0 one
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-4.3.2-5", "5:MQTT-4.3.3-12", "5:MQTT-4.3.3-10")
def test_packet_ids_are_new_messages_once_acknowledged(broker: BrokerProcess, uid: str) -> None:
    sub = connected(broker.port, f"{uid}-s")
    pub = connected(broker.port, f"{uid}-p")
    try:
        subscribed(sub, f"{uid}/t", 0)
        _publish(pub, f"{uid}/t", b"a", 1, packet_id=7)
        assert isinstance(pub.read_packet(), Puback)
        _publish(pub, f"{uid}/t", b"b", 1, packet_id=7, dup=True)  # after PUBACK: a new one
        assert isinstance(pub.read_packet(), Puback)
        _publish(pub, f"{uid}/t", b"c", 2, packet_id=8)
        assert isinstance(pub.read_packet(), Pubrec)
        _publish(pub, f"{uid}/t", b"c", 2, packet_id=8, dup=True)  # before PUBREL: the same
        assert isinstance(pub.read_packet(), Pubrec)
        pub.send_packet(Pubrel(8))
        assert isinstance(pub.read_packet(), Pubcomp)
        _publish(pub, f"{uid}/t", b"d", 2, packet_id=8)  # after PUBCOMP: a new one
        assert isinstance(pub.read_packet(), Pubrec)
        pub.send_packet(Pubrel(8))
        assert isinstance(pub.read_packet(), Pubcomp)
        assert [next_publish(sub).payload for _ in range(4)] == [b"a", b"b", b"c", b"d"]
        assert sub.read_nothing(0.2)
    finally:
        sub.close()
        pub.close()


@pytest.mark.spec(
    "5:MQTT-3.3.1-3",
    "5:MQTT-4.3.1-1",
    "5:MQTT-4.3.2-2",
    "5:MQTT-4.3.3-2",
    "5:MQTT-3.3.2-3",
    "5:MQTT-2.2.1-2",
)
def test_outgoing_dup_is_not_copied_from_the_incoming_publish(
    broker: BrokerProcess, uid: str
) -> None:
    sub = connected(broker.port, f"{uid}-s")
    pub = connected(broker.port, f"{uid}-p")
    try:
        subscribed(sub, f"{uid}/+/x", 2)
        for qos in (0, 1, 2):
            _publish(pub, f"{uid}/{qos}/x", b"m", qos, packet_id=qos, dup=qos > 0)
            got = next_publish(sub)
            assert (got.topic, got.qos, got.dup) == (f"{uid}/{qos}/x", qos, False)
            assert (got.packet_id != 0) == (qos > 0)
    finally:
        sub.close()
        pub.close()


@pytest.mark.spec("5:MQTT-3.3.4-2", "5:MQTT-3.3.4-5")
def test_overlapping_subscriptions_deliver_at_the_highest_qos(
    broker: BrokerProcess, uid: str
) -> None:
    sub = connected(broker.port, f"{uid}-s")
    pub = connected(broker.port, f"{uid}-p")
    try:
        subscribed(sub, f"{uid}/#", 0, packet_id=1)
        subscribed(sub, f"{uid}/a", 2, packet_id=2)
        _publish(pub, f"{uid}/a", b"x", 2, packet_id=1)
        got = next_publish(sub)
        assert got.qos == 2 and got.payload == b"x"
        sub.send_packet(Pubrec(got.packet_id))
        assert isinstance(sub.read_packet(), Pubrel)
        sub.send_packet(Pubcomp(got.packet_id))
        assert sub.read_nothing(0.3)  # one copy for the client
    finally:
        sub.close()
        pub.close()


@pytest.mark.spec("5:MQTT-3.3.1-8")
def test_a_non_retained_publish_leaves_the_retained_message(
    broker: BrokerProcess, uid: str
) -> None:
    pub = connected(broker.port, f"{uid}-p")
    try:
        _publish(pub, f"{uid}/r", b"kept", 1, packet_id=1, retain=True)
        assert isinstance(pub.read_packet(), Puback)
        _publish(pub, f"{uid}/r", b"live", 1, packet_id=2)
        assert isinstance(pub.read_packet(), Puback)
        _publish(pub, f"{uid}/r", b"", 1, packet_id=3)  # empty but not retained
        assert isinstance(pub.read_packet(), Puback)
        late = connected(broker.port, f"{uid}-late")
        try:
            subscribed(late, f"{uid}/r", 1)
            got = next_publish(late)
            assert (got.payload, got.retain) == (b"kept", True)
        finally:
            late.close()
    finally:
        pub.close()


@pytest.mark.spec("5:MQTT-3.3.2-7")
def test_topic_aliases_do_not_survive_a_reconnect(broker: BrokerProcess, uid: str) -> None:
    first = connected(broker.port, uid)
    try:
        _publish(first, f"{uid}/a", b"1", properties=Properties(topic_alias=1))
        first.send_packet(Disconnect(0))
    finally:
        first.close()
    again = connected(broker.port, uid)
    try:
        _publish(again, "", b"2", properties=Properties(topic_alias=1))
        assert closing_reason(again) == 0x82
    finally:
        again.close()


@pytest.mark.spec("5:MQTT-3.1.2-26", "5:MQTT-3.3.2-11", "5:MQTT-3.1.2-27")
def test_outgoing_aliases_respect_the_client_maximum(broker: BrokerProcess, uid: str) -> None:
    limited = connected(broker.port, f"{uid}-2", properties=Properties(topic_alias_maximum=2))
    none = connected(broker.port, f"{uid}-0")
    pub = connected(broker.port, f"{uid}-p")
    try:
        for raw in (limited, none):
            subscribed(raw, f"{uid}/#", 0)
        for n in range(12):
            _publish(pub, f"{uid}/{n % 5}", b"x")
        aliases = set()
        for _ in range(12):
            got = next_publish(limited)
            if got.properties is not None and got.properties.topic_alias is not None:
                aliases.add(got.properties.topic_alias)
            plain = next_publish(none)
            assert plain.topic and (
                plain.properties is None or plain.properties.topic_alias is None
            )
        assert aliases and aliases <= {1, 2}
    finally:
        for raw in (limited, none, pub):
            raw.close()


@pytest.mark.spec("5:MQTT-4.7.2-1", "3:MQTT-4.7.2-1")
@pytest.mark.parametrize("version", [5, 4], ids=["mqtt5", "mqtt311"])
def test_wildcards_at_the_start_do_not_match_dollar_topics(
    start_broker: StartBroker, uid: str, version: int
) -> None:
    """Clients may not publish to "$" topics (0x87), so the broker's own $SYS topics serve."""
    broker = start_broker(XMQ_SYS__INTERVAL_S="0.2")
    wild = connected(broker.port, f"{uid}-w", version=version)
    exact = connected(broker.port, f"{uid}-e", version=version)
    try:
        wild.send_packet(
            Subscribe(1, [SubscriptionRequest("#", 0), SubscriptionRequest("+/broker/#", 0)])
        )
        assert isinstance(wild.read_packet(), Suback)
        subscribed(exact, "$SYS/#", 0)
        for _ in range(3):  # several $SYS rounds reach "$SYS/#" ...
            assert next_publish(exact).topic.startswith("$SYS/")
        assert wild.read_nothing(0.5)  # ... and none reaches "#" or "+/broker/#"
    finally:
        for raw in (wild, exact):
            raw.close()


@pytest.mark.spec("5:MQTT-4.7.3-4", "5:MQTT-1.5.4-3", "3:MQTT-4.7.3-4", "3:MQTT-1.5.3-3")
@pytest.mark.parametrize("version", [5, 4], ids=["mqtt5", "mqtt311"])
def test_topics_are_matched_without_normalisation(
    broker: BrokerProcess, uid: str, version: int
) -> None:
    sub = connected(broker.port, f"{uid}-s", version=version)
    pub = connected(broker.port, f"{uid}-p", version=version)
    try:
        subscribed(sub, f"{uid}/\u00fc", 0)  # precomposed u-umlaut
        subscribed(sub, f"{uid}/\ufeffb", 0, packet_id=2)  # with a BOM
        _publish(pub, f"{uid}/u\u0308", b"decomposed")  # not the same string
        _publish(pub, f"{uid}/b", b"no-bom")
        _publish(pub, f"{uid}/\ufeffb", b"bom")
        _publish(pub, f"{uid}/\u00fc", b"exact")
        got = [next_publish(sub) for _ in range(2)]
        assert [(p.topic, p.payload) for p in got] == [
            (f"{uid}/\ufeffb", b"bom"),
            (f"{uid}/\u00fc", b"exact"),
        ]
        assert sub.read_nothing(0.2)
    finally:
        sub.close()
        pub.close()


@pytest.mark.spec("5:MQTT-3.3.4-10", "5:MQTT-4.9.0-3", "5:MQTT-4.9.0-1")
def test_other_packets_flow_while_the_send_quota_is_zero(broker: BrokerProcess, uid: str) -> None:
    sub = connected(broker.port, f"{uid}-s", properties=Properties(receive_maximum=1))
    pub = connected(broker.port, f"{uid}-p")
    try:
        subscribed(sub, f"{uid}/t", 1)
        for n in (1, 2):
            _publish(pub, f"{uid}/t", b"%d" % n, 1, packet_id=n)
        first = next_publish(sub)
        assert sub.read_nothing(0.3)  # quota 1: the second waits
        sub.send_packet(Pingreq())
        assert isinstance(sub.read_packet(), Pingresp)
        subscribed(sub, f"{uid}/other", 0, packet_id=9)
        sub.send_packet(Puback(first.packet_id))
        assert next_publish(sub).payload == b"2"
    finally:
        sub.close()
        pub.close()


@pytest.mark.spec(
    "5:MQTT-2.1.3-1",
    "5:MQTT-3.6.1-1",
    "5:MQTT-3.3.2-19",
    "5:MQTT-1.5.7-1",
    "5:MQTT-3.10.3-1",
    "5:MQTT-4.7.3-2",
    "5:MQTT-1.5.5-1",
)
@pytest.mark.parametrize(
    "data",
    [
        b"\x41\x02\x00\x01",  # PUBACK with a reserved flag set
        b"\x60\x02\x00\x01",  # PUBREL flags 0000
        b"\x30\x09\x00\x01t\x04\x03\x00\x01\xffx",  # Content Type not UTF-8
        b"\x30\x0c\x00\x01t\x07\x26\x00\x01a\x00\x01\xffx",  # User Property value
        b"\xa2\x06\x00\x01\x00\x00\x01\xff",  # UNSUBSCRIBE filter not UTF-8
        b"\x82\x08\x00\x01\x00\x00\x02a\x00\x00",  # U+0000 in a topic filter
        b"\xc0\x80\x00",  # remaining length 0 in two bytes
        b"\x30\x85\x00\x00\x01tx",  # remaining length 5 in two bytes
    ],
    ids=[
        "puback-flags",
        "pubrel-flags",
        "content-type-not-utf8",
        "user-property-not-utf8",
        "unsubscribe-not-utf8",
        "filter-nul",
        "overlong-length-0",
        "overlong-length-5",
    ],
)
def test_malformed_fields_close_with_0x81(broker: BrokerProcess, uid: str, data: bytes) -> None:
    assert disconnect_reason_for(broker.port, uid, data) == 0x81


@pytest.mark.spec("5:MQTT-4.3.3-7", "5:MQTT-4.3.3-13")
def test_expiry_does_not_cut_a_qos2_exchange(broker: BrokerProcess, uid: str) -> None:
    short = Properties(message_expiry_interval=1)
    sub, _ = resumable(broker.port, f"{uid}-s", clean_start=True)
    subscribed(sub, f"{uid}/t", 2)
    pub = connected(broker.port, f"{uid}-p")
    try:
        _publish(pub, f"{uid}/t", b"x", 2, packet_id=1, properties=short)
        assert isinstance(pub.read_packet(), Pubrec)
        sent = next_publish(sub)  # sent to the subscriber, then never acknowledged
        sub.close()
        time.sleep(1.5)  # both expired now
        pub.send_packet(Pubrel(1))  # the inbound exchange goes on
        comp = pub.read_packet()
        assert isinstance(comp, Pubcomp) and comp.packet_id == 1
        sub, ack = resumable(broker.port, f"{uid}-s", clean_start=False)
        assert ack.session_present
        again = next_publish(sub)  # already sent: no expiry applies
        assert (again.packet_id, again.payload, again.dup) == (sent.packet_id, b"x", True)
    finally:
        sub.send_packet(Disconnect(0, Properties(session_expiry_interval=0)))
        sub.close()
        pub.close()


@pytest.mark.spec("5:MQTT-4.1.0-1", "3:MQTT-4.1.0-2")
@pytest.mark.parametrize("version", [5, 4], ids=["mqtt5", "mqtt311"])
def test_session_state_stays_while_connected(broker: BrokerProcess, uid: str, version: int) -> None:
    """Session Expiry 0 (3.1.1: CleanSession 1): the subscription and an unacknowledged
    delivery are still there while the connection is open."""
    sub = connected(broker.port, f"{uid}-s", version=version)
    pub = connected(broker.port, f"{uid}-p", version=version)
    try:
        subscribed(sub, f"{uid}/t", 1)
        pub.send_packet(Publish(f"{uid}/t", b"1", qos=1, packet_id=1))
        first = next_publish(sub)
        for _ in range(3):
            sub.send_packet(Pingreq())
            assert isinstance(sub.read_packet(), Pingresp)
        pub.send_packet(Publish(f"{uid}/t", b"2", qos=1, packet_id=2))
        second = next_publish(sub)
        assert (second.payload, second.packet_id != first.packet_id) == (b"2", True)
        for packet_id in (first.packet_id, second.packet_id):
            sub.send_packet(Puback(packet_id))
        sub.send_packet(Pingreq())
        assert isinstance(sub.read_packet(), Pingresp)
    finally:
        sub.close()
        pub.close()
