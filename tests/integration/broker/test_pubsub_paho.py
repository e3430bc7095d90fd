"""Publish/subscribe with real paho-mqtt clients (MQTT 5 and 3.1.1) against `xmq serve`."""

from __future__ import annotations

import pytest
from paho.mqtt.enums import MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.subscribeoptions import SubscribeOptions

from tests.support.broker_process import BrokerProcess
from tests.support.paho_client import V5, V311, PahoClient, props


@pytest.mark.spec(
    "5:MQTT-4.5.0-1",
    "3:MQTT-4.5.0-1",
    "5:MQTT-4.6.0-6",
    "3:MQTT-4.6.0-6",
    "5:MQTT-4.6.0-5",
    "3:MQTT-4.6.0-5",
)
@pytest.mark.parametrize("version", [V5, V311], ids=["mqtt5", "mqtt311"])
@pytest.mark.parametrize("qos", [0, 1, 2], ids=["qos0", "qos1", "qos2"])
def test_roundtrip_each_qos(
    broker: BrokerProcess, uid: str, version: MQTTProtocolVersion, qos: int
) -> None:
    sub = PahoClient(broker.port, f"{uid}-s", version)
    pub = PahoClient(broker.port, f"{uid}-p", version)
    try:
        assert sub.connect().reason == 0
        assert sub.subscribe(f"{uid}/+/x", qos) == [qos]
        assert pub.connect().reason == 0
        for n in range(20):
            pub.publish(f"{uid}/{n}/x", f"m{n}", qos=qos)
        got = sub.expect(20)
        assert [m.payload for m in got] == [f"m{n}".encode() for n in range(20)]
        assert {m.qos for m in got} == {qos}
        sub.expect_none(0.2)
    finally:
        sub.close()
        pub.close()


@pytest.mark.spec("5:MQTT-3.8.4-8")
def test_qos_is_downgraded_to_the_subscription(broker: BrokerProcess, uid: str) -> None:
    sub = PahoClient(broker.port, f"{uid}-s")
    pub = PahoClient(broker.port, f"{uid}-p")
    try:
        sub.connect()
        assert sub.subscribe(f"{uid}/t", 1) == [1]
        pub.connect()
        pub.publish(f"{uid}/t", b"x", qos=2)
        [msg] = sub.expect(1)
        assert msg.qos == 1
    finally:
        sub.close()
        pub.close()


def test_wildcards_and_dollar_topics(broker: BrokerProcess, uid: str) -> None:
    sub = PahoClient(broker.port, f"{uid}-s")
    pub = PahoClient(broker.port, f"{uid}-p")
    try:
        sub.connect()
        sub.subscribe(f"{uid}/#", 1)
        sub.subscribe(f"{uid}/a/+", 1)
        pub.connect()
        pub.publish(f"{uid}/a/b", b"1")
        pub.publish(f"{uid}", b"2")
        pub.publish(f"{uid}/c/d/e", b"3")
        got = sub.expect(3)
        # a/b matches two filters of the same client: delivered once (MQTT 5 may merge)
        assert sorted(m.payload for m in got) == [b"1", b"2", b"3"]
        sub.expect_none(0.3)
    finally:
        sub.close()
        pub.close()


def test_hash_does_not_match_sys(broker: BrokerProcess, uid: str) -> None:
    sub = PahoClient(broker.port, f"{uid}-s")
    try:
        sub.connect()
        sub.subscribe("#", 0)
        sub.subscribe("+/broker/#", 0)
        got = []
        while not sub.messages.empty():
            got.append(sub.messages.get())
        assert not [m for m in got if m.topic.startswith("$")]
    finally:
        sub.close()


@pytest.mark.spec(
    "5:MQTT-3.3.1-5",
    "5:MQTT-3.3.1-6",
    "5:MQTT-3.3.1-7",
    "5:MQTT-3.3.1-9",
    "5:MQTT-3.3.1-12",
)
def test_retained_set_replace_clear(broker: BrokerProcess, uid: str) -> None:
    pub = PahoClient(broker.port, f"{uid}-p")
    try:
        pub.connect()
        pub.publish(f"{uid}/r", b"one", qos=1, retain=True)
        pub.publish(f"{uid}/r", b"two", qos=1, retain=True)
        first = PahoClient(broker.port, f"{uid}-s1")
        first.connect()
        first.subscribe(f"{uid}/#", 1)
        [msg] = first.expect(1)
        assert (msg.payload, msg.retain) == (b"two", True)
        # a live subscriber gets retained publications with retain 0 (no retain-as-published)
        pub.publish(f"{uid}/r", b"three", qos=1, retain=True)
        [live] = first.expect(1)
        assert (live.payload, live.retain) == (b"three", False)
        pub.publish(f"{uid}/r", b"", qos=1, retain=True)  # clear
        first.expect(1)
        first.close()
        second = PahoClient(broker.port, f"{uid}-s2")
        second.connect()
        second.subscribe(f"{uid}/#", 1)
        second.expect_none(0.3)
        second.close()
    finally:
        pub.close()


@pytest.mark.spec(
    "5:MQTT-3.3.1-10",
    "5:MQTT-3.3.1-11",
    "5:MQTT-3.3.1-13",
    "5:MQTT-3.8.4-3",
    "5:MQTT-3.8.4-4",
)
def test_retain_handling_and_retain_as_published(broker: BrokerProcess, uid: str) -> None:
    pub = PahoClient(broker.port, f"{uid}-p")
    sub = PahoClient(broker.port, f"{uid}-s")
    try:
        pub.connect()
        pub.publish(f"{uid}/r", b"kept", qos=1, retain=True)
        sub.connect()
        assert sub.subscribe(f"{uid}/r", options=SubscribeOptions(qos=1, retainHandling=2)) == [1]
        sub.expect_none(0.3)
        # handling 1: only on a new subscription -> already exists: nothing
        sub.subscribe(f"{uid}/r", options=SubscribeOptions(qos=1, retainHandling=1))
        sub.expect_none(0.3)
        sub.subscribe(f"{uid}/+", options=SubscribeOptions(qos=1, retainHandling=1))
        [msg] = sub.expect(1)
        assert msg.retain
        sub.subscribe(f"{uid}/r", options=SubscribeOptions(qos=1, retainAsPublished=True))
        sub.expect(1)  # handling 0: sent again
        assert sub.unsubscribe(f"{uid}/+") == [0]
        pub.publish(f"{uid}/r", b"live", qos=1, retain=True)
        [live] = sub.expect(1)
        assert (live.payload, live.retain) == (b"live", True)
    finally:
        pub.close()
        sub.close()


@pytest.mark.spec("5:MQTT-3.8.3-3")
def test_no_local(broker: BrokerProcess, uid: str) -> None:
    client = PahoClient(broker.port, f"{uid}-c")
    try:
        client.connect()
        client.subscribe(f"{uid}/t", options=SubscribeOptions(qos=1, noLocal=True))
        client.publish(f"{uid}/t", b"self")
        client.expect_none(0.3)
    finally:
        client.close()


@pytest.mark.spec("5:MQTT-3.3.4-3", "5:MQTT-3.3.4-4")
def test_subscription_identifiers(broker: BrokerProcess, uid: str) -> None:
    sub = PahoClient(broker.port, f"{uid}-s")
    pub = PahoClient(broker.port, f"{uid}-p")
    try:
        sub.connect()
        sub.subscribe(
            f"{uid}/#", 1, properties=props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=7)
        )
        sub.subscribe(
            f"{uid}/a", 1, properties=props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=9)
        )
        pub.connect()
        pub.publish(f"{uid}/a", b"x")
        [msg] = sub.expect(1)
        assert sorted(msg.properties.SubscriptionIdentifier) == [7, 9]
        sub.expect_none(0.3)
    finally:
        sub.close()
        pub.close()


@pytest.mark.spec(
    "5:MQTT-3.3.2-4",
    "5:MQTT-3.3.2-15",
    "5:MQTT-3.3.2-16",
    "5:MQTT-3.3.2-17",
    "5:MQTT-3.3.2-18",
    "5:MQTT-3.3.2-20",
)
def test_properties_pass_through(broker: BrokerProcess, uid: str) -> None:
    sub = PahoClient(broker.port, f"{uid}-s")
    pub = PahoClient(broker.port, f"{uid}-p")
    try:
        sub.connect()
        sub.subscribe(f"{uid}/t", 1)
        pub.connect()
        sent = props(
            PacketTypes.PUBLISH,
            ContentType="text/plain",
            ResponseTopic=f"{uid}/reply",
            CorrelationData=b"\x01\x02",
            PayloadFormatIndicator=1,
            UserProperty=[("a", "1"), ("b", "2"), ("a", "3")],
        )
        pub.publish(f"{uid}/t", "héllo", properties=sent)
        [msg] = sub.expect(1)
        p = msg.properties
        assert p.ContentType == "text/plain"
        assert p.ResponseTopic == f"{uid}/reply"
        assert p.CorrelationData == b"\x01\x02"
        assert p.PayloadFormatIndicator == 1
        assert p.UserProperty == [("a", "1"), ("b", "2"), ("a", "3")]
    finally:
        sub.close()
        pub.close()
