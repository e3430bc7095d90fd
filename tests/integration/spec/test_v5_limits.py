"""MQTT 5.0 Maximum Packet Size for acknowledgements, server capabilities and outgoing QoS flows."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient, connected, resumable, subscribed
from xmq.codec.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Subscribe,
    SubscriptionRequest,
    Unsubscribe,
    Will,
)
from xmq.codec.properties import Properties
from xmq.codec.reader import PacketReader

pytestmark = pytest.mark.integration

StartBroker = Callable[..., BrokerProcess]


def _sized(raw: RawClient) -> tuple[Packet | None, int]:
    """The next packet from the broker and its size in bytes on the wire."""
    reader = PacketReader(protocol_version=5)
    size = 0
    raw.sock.settimeout(10)
    while True:
        byte = raw.sock.recv(1)
        if not byte:
            return None, size
        size += 1
        packets = reader.feed(byte)
        if packets:
            return packets[0], size


@pytest.mark.spec(
    "5:MQTT-3.1.2-24",
    "5:MQTT-3.2.2-19",
    "5:MQTT-3.2.2-20",
    "5:MQTT-3.4.2-2",
    "5:MQTT-3.4.2-3",
    "5:MQTT-3.5.2-2",
    "5:MQTT-3.5.2-3",
    "5:MQTT-3.7.2-2",
    "5:MQTT-3.7.2-3",
    "5:MQTT-3.9.2-1",
    "5:MQTT-3.9.2-2",
    "5:MQTT-3.11.2-1",
    "5:MQTT-3.11.2-2",
    "5:MQTT-3.14.2-3",
    "5:MQTT-3.14.2-4",
    "5:MQTT-3.4.2-1",
    "5:MQTT-3.5.2-1",
    "5:MQTT-3.7.2-1",
    "5:MQTT-3.14.2-1",
    "5:MQTT-3.2.2-8",
)
def test_every_answer_fits_the_client_maximum_packet_size(broker: BrokerProcess, uid: str) -> None:
    """Failure acknowledgements and a DISCONNECT that would carry a Reason String, to a client
    accepting 20 bytes (the reader refuses reason codes the specification does not define)."""
    limit = 20
    raw = RawClient(broker.port)
    try:
        raw.send_packet(Connect(client_id=uid, properties=Properties(maximum_packet_size=limit)))
        answers: list[tuple[Packet | None, int]] = [_sized(raw)]
        raw.send_packet(Publish(f"{uid}/nobody", b"x", qos=1, packet_id=1))  # 0x10
        answers.append(_sized(raw))
        raw.send_packet(Publish(f"{uid}/nobody", b"x", qos=2, packet_id=2))  # 0x10
        answers.append(_sized(raw))
        raw.send_packet(Pubrel(2))
        answers.append(_sized(raw))
        raw.send_packet(Pubrel(3))  # unknown packet id: 0x92
        answers.append(_sized(raw))
        raw.send_packet(Subscribe(4, [SubscriptionRequest(f"{uid}/#/bad", 0)]))  # 0x8F
        answers.append(_sized(raw))
        raw.send_packet(Unsubscribe(5, [f"{uid}/never"]))  # 0x11
        answers.append(_sized(raw))
        raw.send_packet(Connect(client_id=uid))  # Protocol Error, with a reason to tell
        answers.append(_sized(raw))
        kinds = [type(packet).__name__ for packet, _ in answers]
        assert kinds == [
            "Connack",
            "Puback",
            "Pubrec",
            "Pubcomp",
            "Pubcomp",
            "Suback",
            "Unsuback",
            "Disconnect",
        ]
        assert all(size <= limit for _, size in answers), answers
        disconnect = answers[-1][0]
        assert isinstance(disconnect, Disconnect) and disconnect.reason_code == 0x82
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-3.2.2-9", "5:MQTT-3.2.2-10", "5:MQTT-3.2.2-12", "5:MQTT-3.2.2-13")
def test_capabilities_below_the_maximum(start_broker: StartBroker, uid: str) -> None:
    broker = start_broker("mqtt: {maximum_qos: 1, retain_available: false}\n")
    raw = RawClient(broker.port)
    try:
        ack = raw.connect(f"{uid}-ok")
        assert ack.properties is not None
        assert ack.properties.maximum_qos == 1 and ack.properties.retain_available == 0
        subscribed(raw, f"{uid}/t", 1)  # a request for QoS 2 is accepted (granted lower) ...
        raw.send_packet(Subscribe(2, [SubscriptionRequest(f"{uid}/u", 2)]))
        granted = raw.read_packet()
        assert granted is not None and getattr(granted, "reason_codes", None) in ([1], [0])
    finally:
        raw.close()
    for will, code in (
        (Will(f"{uid}/w", b"x", qos=2), 0x9B),
        (Will(f"{uid}/w", b"x", retain=True), 0x9A),
    ):
        refused = RawClient(broker.port)
        try:
            refused.send_packet(Connect(client_id=f"{uid}-w", will=will))
            packets = refused.read_until_closed()
            assert len(packets) == 1
            assert isinstance(packets[0], Connack) and packets[0].reason_code == code
        finally:
            refused.close()


@pytest.mark.spec("5:MQTT-4.4.0-2")
def test_a_refused_delivery_is_not_sent_again(broker: BrokerProcess, uid: str) -> None:
    sub, _ = resumable(broker.port, f"{uid}-s", clean_start=True)
    pub = connected(broker.port, f"{uid}-p")
    try:
        subscribed(sub, f"{uid}/t", 1)
        pub.send_packet(Publish(f"{uid}/t", b"x", qos=1, packet_id=1))
        got = sub.read_packet()
        assert isinstance(got, Publish)
        sub.send_packet(Puback(got.packet_id, 0x80))
        sub.send_packet(Disconnect(0))
        sub.close()
        sub, ack = resumable(broker.port, f"{uid}-s", clean_start=False)
        assert ack.session_present
        assert sub.read_nothing(0.5)
    finally:
        sub.send_packet(Disconnect(0, Properties(session_expiry_interval=0)))
        sub.close()
        pub.close()


@pytest.mark.spec(
    "5:MQTT-4.3.3-1", "5:MQTT-4.3.3-3", "5:MQTT-4.3.3-4", "5:MQTT-4.3.3-5", "5:MQTT-2.2.1-5"
)
def test_outgoing_qos2_flow_and_its_resumption(broker: BrokerProcess, uid: str) -> None:
    sub, _ = resumable(broker.port, f"{uid}-s", clean_start=True)
    pub = connected(broker.port, f"{uid}-p")
    try:
        subscribed(sub, f"{uid}/t", 2)
        pub.send_packet(Publish(f"{uid}/t", b"one", qos=2, packet_id=1))
        first = sub.read_packet()
        assert isinstance(first, Publish) and first.qos == 2 and first.packet_id != 0
        sub.close()  # no PUBREC: still unacknowledged
        sub, _ = resumable(broker.port, f"{uid}-s", clean_start=False)
        again = sub.read_packet()
        assert isinstance(again, Publish) and again.packet_id == first.packet_id and again.dup
        sub.send_packet(Pubrec(again.packet_id))
        rel = sub.read_packet()
        assert isinstance(rel, Pubrel) and rel.packet_id == first.packet_id
        sub.close()  # no PUBCOMP: the PUBREL is still unacknowledged, the PUBLISH is not re-sent
        sub, _ = resumable(broker.port, f"{uid}-s", clean_start=False)
        rel_again = sub.read_packet()
        assert isinstance(rel_again, Pubrel) and rel_again.packet_id == first.packet_id
        sub.send_packet(Pubcomp(first.packet_id))
        assert sub.read_nothing(0.3)
        acks = [pub.read_packet()]
        assert isinstance(acks[0], Pubrec)
    finally:
        sub.send_packet(Disconnect(0, Properties(session_expiry_interval=0)))
        sub.close()
        pub.close()


@pytest.mark.spec("5:MQTT-3.1.3-8", "3:MQTT-3.1.3-9", "5:MQTT-3.2.2-6", "3:MQTT-3.2.2-4")
def test_a_client_id_too_long_is_refused(start_broker: StartBroker, uid: str) -> None:
    """Our choice: client ids longer than mqtt.max_client_id_length get 0x85 (3.1.1: 0x02)."""
    broker = start_broker("mqtt: {max_client_id_length: 23}\n")
    for version, code in ((5, 0x85), (4, 0x02)):
        raw = RawClient(broker.port, version=version)
        try:
            raw.send_packet(Connect(protocol_version=version, client_id="x" * 24))
            packets = raw.read_until_closed()
            assert len(packets) == 1
            ack = packets[0]
            assert isinstance(ack, Connack) and (ack.reason_code, ack.session_present) == (
                code,
                False,
            )
        finally:
            raw.close()


@pytest.mark.spec("5:MQTT-3.6.2-1", "5:MQTT-3.6.2-2", "5:MQTT-3.6.2-3")
def test_outgoing_pubrel_fits_the_client_maximum_packet_size(
    broker: BrokerProcess, uid: str
) -> None:
    limit = 40
    raw = RawClient(broker.port)
    try:
        ack = raw.connect(uid, properties=Properties(maximum_packet_size=limit))
        assert ack.reason_code == 0
        subscribed(raw, uid, 2)
        raw.send_packet(Publish(uid, b"x", qos=2, packet_id=1))
        packets = [_sized(raw) for _ in range(2)]  # our PUBREC and the delivery, in any order
        [(delivery, _)] = [(p, n) for p, n in packets if isinstance(p, Publish)]
        assert isinstance(delivery, Publish)
        raw.send_packet(Pubrec(delivery.packet_id))
        raw.send_packet(Pubrel(1))
        answers = [_sized(raw) for _ in range(2)]  # the server's PUBREL and PUBCOMP
        kinds = sorted(type(p).__name__ for p, _ in answers)
        assert kinds == ["Pubcomp", "Pubrel"]
        assert all(size <= limit for _, size in packets + answers)
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-4.7.3-3", "3:MQTT-4.7.3-3")
@pytest.mark.parametrize("version", [5, 4], ids=["mqtt5", "mqtt311"])
def test_the_longest_topic_name(broker: BrokerProcess, uid: str, version: int) -> None:
    """65,535 bytes, the most a two-byte length can say, is accepted and forwarded intact."""
    topic = (uid + "/" + "t" * 65535)[:65535]
    sub = connected(broker.port, f"{uid}-s", version=version)
    pub = connected(broker.port, f"{uid}-p", version=version)
    try:
        subscribed(sub, topic, 0)
        pub.send_packet(Publish(topic, b"x"))
        got = sub.read_packet()
        assert isinstance(got, Publish) and got.topic == topic
    finally:
        sub.close()
        pub.close()
