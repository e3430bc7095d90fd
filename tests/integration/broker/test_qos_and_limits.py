"""QoS 2 exactly-once on the way in, QoS 2 state across reconnects, bounded queues, $SYS."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.paho_client import PahoClient
from tests.support.raw_client import RawClient
from xmq.codec.packets import (
    Connack,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    SubscriptionRequest,
)
from xmq.codec.properties import Properties

StartBroker = Callable[..., BrokerProcess]


def _connect(port: int, client_id: str, clean: bool = True, expiry: int = 0) -> RawClient:
    raw = RawClient(port)
    props = Properties()
    if expiry:
        props.session_expiry_interval = expiry
    ack = raw.connect(client_id, clean_start=clean, properties=props)
    assert isinstance(ack, Connack) and ack.reason_code == 0
    return raw


@pytest.mark.spec("5:MQTT-4.3.3-10")
def test_inbound_qos2_duplicate_is_delivered_once(broker: BrokerProcess, uid: str) -> None:
    sub = PahoClient(broker.port, f"{uid}-s")
    sub.connect()
    sub.subscribe(f"{uid}/t", 2)
    raw = _connect(broker.port, f"{uid}-p")
    try:
        publish = Publish(f"{uid}/t", b"once", qos=2, packet_id=11)
        raw.send_packet(publish)
        assert isinstance(raw.read_packet(), Pubrec)
        raw.send_packet(Publish(f"{uid}/t", b"once", qos=2, packet_id=11, dup=True))
        assert isinstance(raw.read_packet(), Pubrec)
        raw.send_packet(Pubrel(11))
        comp = raw.read_packet()
        assert isinstance(comp, Pubcomp) and comp.reason_code == 0
        raw.send_packet(Pubrel(11))  # unknown now
        again = raw.read_packet()
        assert isinstance(again, Pubcomp) and again.reason_code == 0x92
        [msg] = sub.expect(1)
        assert msg.payload == b"once"
        sub.expect_none(0.3)
    finally:
        raw.close()
        sub.close()


@pytest.mark.spec("5:MQTT-4.4.0-1", "5:MQTT-4.3.3-6", "5:MQTT-4.3.3-5")
def test_outbound_qos2_pubrel_resent_after_reconnect(broker: BrokerProcess, uid: str) -> None:
    sub = _connect(broker.port, f"{uid}-s", expiry=60)
    sub.send_packet(Subscribe(1, [SubscriptionRequest(f"{uid}/t", 2)]))
    assert isinstance(sub.read_packet(), Suback)
    pub = PahoClient(broker.port, f"{uid}-p")
    pub.connect()
    pub.publish(f"{uid}/t", b"exactly", qos=2)
    delivered = sub.read_packet()
    assert isinstance(delivered, Publish) and delivered.qos == 2
    sub.send_packet(Pubrec(delivered.packet_id))
    rel = sub.read_packet()
    assert isinstance(rel, Pubrel) and rel.packet_id == delivered.packet_id
    sub.close()  # PUBCOMP never sent
    again = _connect(broker.port, f"{uid}-s", clean=False, expiry=60)
    try:
        resent = again.read_packet()
        assert isinstance(resent, Pubrel) and resent.packet_id == delivered.packet_id
        again.send_packet(Pubcomp(delivered.packet_id))
        try:
            extra = again.read_packet(timeout=0.5)
        except TimeoutError:
            extra = None
        assert extra is None  # the message itself is not sent again
    finally:
        again.close()
        pub.close()


def test_offline_queue_is_bounded(start_broker: StartBroker, uid: str) -> None:
    broker = start_broker(XMQ_LIMITS__MAX_QUEUED_MESSAGES="5")
    sub = _connect(broker.port, f"{uid}-s", expiry=60)
    sub.send_packet(Subscribe(1, [SubscriptionRequest(f"{uid}/t", 1)]))
    assert isinstance(sub.read_packet(), Suback)
    sub.close()
    pub = PahoClient(broker.port, f"{uid}-p")
    pub.connect()
    for n in range(20):
        pub.publish(f"{uid}/t", f"{n}", qos=1)
    pub.close()
    again = _connect(broker.port, f"{uid}-s", clean=False, expiry=60)
    try:
        got = []
        while True:
            try:
                packet = again.read_packet(timeout=0.5)
            except TimeoutError:
                break
            assert isinstance(packet, Publish)
            got.append(packet.payload)
        assert got == [f"{n}".encode() for n in range(5)]  # the oldest kept, the rest dropped
    finally:
        again.close()


def test_sys_topics(start_broker: StartBroker, uid: str) -> None:
    broker = start_broker(XMQ_SYS__INTERVAL_S="0.5")
    sub = PahoClient(broker.port, f"{uid}-s")
    try:
        sub.connect()
        sub.subscribe("$SYS/broker/clients/connected", 0)
        values = {int(m.payload) for m in sub.expect(2, timeout=5)}
        assert 1 in values
        sub.subscribe("$SYS/broker/version", 0)
        versions = [m for m in sub.expect(3, timeout=5) if m.topic.endswith("version")]
        assert versions and versions[0].payload.startswith(b"xmq ")
    finally:
        sub.close()
