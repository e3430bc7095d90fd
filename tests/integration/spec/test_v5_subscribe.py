"""MQTT 5.0 SUBSCRIBE / SUBACK, UNSUBSCRIBE / UNSUBACK and shared subscriptions on a raw socket."""

from __future__ import annotations

import time

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.http_probe import metric, wait_port
from tests.support.raw_client import (
    RawClient,
    connected,
    end_session,
    next_publish,
    receive_qos2,
    resumable,
    subscribed,
)
from xmq.codec.packets import (
    Disconnect,
    Puback,
    Publish,
    Suback,
    Subscribe,
    SubscriptionRequest,
    Unsuback,
    Unsubscribe,
)
from xmq.codec.properties import Properties

pytestmark = pytest.mark.integration


def _suback(raw: RawClient, packet_id: int, *requests: SubscriptionRequest) -> list[int]:
    raw.send_packet(Subscribe(packet_id, list(requests)))
    ack = raw.read_packet()
    assert isinstance(ack, Suback) and ack.packet_id == packet_id, ack
    return ack.reason_codes


def _unsuback(raw: RawClient, packet_id: int, *filters: str) -> list[int]:
    raw.send_packet(Unsubscribe(packet_id, list(filters)))
    ack = raw.read_packet()
    assert isinstance(ack, Unsuback) and ack.packet_id == packet_id, ack
    return ack.reason_codes


@pytest.mark.spec(
    "5:MQTT-3.8.4-1",
    "5:MQTT-3.8.4-2",
    "5:MQTT-3.8.4-5",
    "5:MQTT-3.8.4-6",
    "5:MQTT-3.8.4-7",
    "5:MQTT-3.9.3-1",
    "5:MQTT-3.9.3-2",
    "5:MQTT-2.2.1-6",
    "5:MQTT-3.2.2-10",
    "5:MQTT-4.7.1-2",
    "5:MQTT-4.8.2-2",
    "5:MQTT-4.7.3-1",
)
def test_one_reason_code_per_filter_in_order(broker: BrokerProcess, uid: str) -> None:
    raw = connected(broker.port, uid)
    try:
        codes = _suback(
            raw,
            0xBEEF,
            SubscriptionRequest(f"{uid}/two", 2),
            SubscriptionRequest(f"{uid}/a+", 1),  # '+' must fill a whole level
            SubscriptionRequest(f"{uid}/zero", 0),
            SubscriptionRequest("$share/a+b/x", 1),  # ShareName with '+'
            SubscriptionRequest(f"{uid}/one/+", 1),
            SubscriptionRequest("$share/g", 1),  # no "/" and filter after the ShareName
            SubscriptionRequest("", 1),  # empty
        )
        assert codes == [2, 0x8F, 0, 0x8F, 1, 0x8F, 0x8F]
    finally:
        raw.close()


@pytest.mark.spec(
    "5:MQTT-3.10.4-1",
    "5:MQTT-3.10.4-4",
    "5:MQTT-3.10.4-5",
    "5:MQTT-3.10.4-6",
    "5:MQTT-3.11.3-1",
    "5:MQTT-3.11.3-2",
    "5:MQTT-3.10.4-2",
)
def test_unsubscribe_matches_filters_exactly(broker: BrokerProcess, uid: str) -> None:
    sub = connected(broker.port, f"{uid}-s")
    pub = connected(broker.port, f"{uid}-p")
    try:
        assert _suback(
            sub,
            1,
            SubscriptionRequest(f"{uid}/+", 0),
            SubscriptionRequest(f"{uid}/b", 0),
            SubscriptionRequest(f"{uid}/c", 0),
        ) == [0, 0, 0]
        # "a" was never subscribed, "b" is, "+" is not removed by a filter it matches
        assert _unsuback(sub, 0x7001, f"{uid}/a", f"{uid}/b", f"{uid}/c") == [0x11, 0, 0]
        pub.send_packet(Publish(f"{uid}/b", b"via-plus"))
        got = sub.read_packet()
        assert isinstance(got, Publish) and got.payload == b"via-plus"
        assert _unsuback(sub, 0x7002, f"{uid}/+") == [0]
        pub.send_packet(Publish(f"{uid}/b", b"after"))
        assert sub.read_nothing(0.3)
        assert _unsuback(sub, 0x7003, f"{uid}/+") == [0x11]  # still answered
    finally:
        sub.close()
        pub.close()


@pytest.mark.spec("5:MQTT-4.8.2-3")
def test_shared_subscription_respects_the_granted_qos(broker: BrokerProcess, uid: str) -> None:
    sub = connected(broker.port, f"{uid}-s")
    pub = connected(broker.port, f"{uid}-p")
    try:
        subscribed(sub, f"$share/g/{uid}/t", 0)
        pub.send_packet(Publish(f"{uid}/t", b"x", qos=2, packet_id=1))
        got = sub.read_packet()
        assert isinstance(got, Publish) and got.qos == 0
    finally:
        sub.close()
        pub.close()


def _shared_pair(broker: BrokerProcess, uid: str) -> tuple[RawClient, RawClient, RawClient]:
    one = connected(broker.port, f"{uid}-1")
    two = connected(broker.port, f"{uid}-2")
    pub = connected(broker.port, f"{uid}-p")
    subscribed(one, f"$share/g/{uid}/t", 1)
    subscribed(two, f"$share/g/{uid}/t", 1)
    return one, two, pub


def _first_receiver(one: RawClient, two: RawClient) -> tuple[RawClient, RawClient, Publish]:
    for receiver, other in ((one, two), (two, one)):
        try:
            got = receiver.read_packet(timeout=0.5)
        except TimeoutError:
            continue
        assert isinstance(got, Publish)
        return receiver, other, got
    raise AssertionError("no shared subscriber got the message")


@pytest.mark.spec("5:MQTT-4.8.2-6")
def test_shared_message_refused_by_its_subscriber_is_not_sent_to_another(
    broker: BrokerProcess, uid: str
) -> None:
    one, two, pub = _shared_pair(broker, uid)
    try:
        pub.send_packet(Publish(f"{uid}/t", b"x", qos=1, packet_id=1))
        receiver, other, got = _first_receiver(one, two)
        receiver.send_packet(Puback(got.packet_id, 0x80))
        assert other.read_nothing(0.5)
    finally:
        for raw in (one, two, pub):
            raw.close()


def _shared_qos2_members(
    broker: BrokerProcess, uid: str, expiry: int
) -> tuple[RawClient, RawClient, RawClient]:
    """Two members of one QoS 2 shared group (Session Expiry ``expiry``) and a publisher."""
    members = []
    for n in (1, 2):
        raw = RawClient(broker.port)
        props = Properties(session_expiry_interval=expiry) if expiry else None
        assert raw.connect(f"{uid}-{n}", properties=props).reason_code == 0
        subscribed(raw, f"$share/g/{uid}/t", 2)
        members.append(raw)
    return members[0], members[1], connected(broker.port, f"{uid}-p")


def _shared_drops(broker: BrokerProcess, reason: str) -> float:
    port = wait_port(broker, "metrics")
    return metric(port, "xmq_messages_dropped_by_reason_total", f'reason="{reason}"')


@pytest.mark.spec("5:MQTT-4.8.2-5")
def test_shared_message_of_an_ended_session_is_not_sent_to_another(
    broker: BrokerProcess, uid: str
) -> None:
    """A QoS 2 message sent to a member whose session ends (Session Expiry 0) before the
    delivery completed is dropped and counted, never sent to the other member; a QoS 1 one
    (the spec says SHOULD) and one only queued go to the other member."""
    one, two, pub = _shared_qos2_members(broker, uid, expiry=0)
    before = _shared_drops(broker, "shared_session_ended")
    try:
        pub.send_packet(Publish(f"{uid}/t", b"two", qos=2, packet_id=1))
        receiver, other, got = _first_receiver(one, two)
        assert got.qos == 2
        receiver.close()  # no PUBREC; Session Expiry Interval 0: the session ends now
        assert other.read_nothing(1.5)
        deadline = time.monotonic() + 10
        while _shared_drops(broker, "shared_session_ended") < before + 1:
            assert time.monotonic() < deadline, "the dropped message was not counted"
            time.sleep(0.05)
        # QoS 1: the message the member did not acknowledge goes to the member left
        pub.send_packet(Publish(f"{uid}/t", b"one", qos=1, packet_id=2))
        again = next_publish(other)
        assert again.payload == b"one"
        other.send_packet(Puback(again.packet_id))
    finally:
        for raw in (one, two, pub):
            raw.close()


def test_shared_qos1_of_a_member_that_left_goes_to_another(broker: BrokerProcess, uid: str) -> None:
    """A QoS 1 shared message in flight, and one still queued, go to another member as soon
    as their member's connection is lost (its session stays): MQTT 5.0 4.8.2 allows it."""
    one, two, pub = _shared_qos2_members(broker, uid, expiry=60)
    try:
        pub.send_packet(Publish(f"{uid}/t", b"q1", qos=1, packet_id=1))
        receiver, other, got = _first_receiver(one, two)
        assert got.payload == b"q1"
        receiver.close()  # not acknowledged; the session stays
        again = next_publish(other)
        assert (again.payload, again.qos) == (b"q1", 1)
        other.send_packet(Puback(again.packet_id))
    finally:
        for raw in (one, two, pub):
            end_session(raw)


@pytest.mark.spec("5:MQTT-3.8.3-3")
def test_no_local_is_per_client_id(broker: BrokerProcess, uid: str) -> None:
    me = connected(broker.port, f"{uid}-me")
    other = connected(broker.port, f"{uid}-o")
    try:
        assert _suback(me, 1, SubscriptionRequest(f"{uid}/t", 0, no_local=True)) == [0]
        me.send_packet(Publish(f"{uid}/t", b"self"))
        other.send_packet(Publish(f"{uid}/t", b"other"))
        got = me.read_packet()
        assert isinstance(got, Publish) and got.payload == b"other"
        assert me.read_nothing(0.2)
    finally:
        me.close()
        other.close()


@pytest.mark.spec("5:MQTT-3.1.2-29")
def test_no_reason_strings_when_problem_information_is_refused(
    broker: BrokerProcess, uid: str
) -> None:
    raw = connected(broker.port, uid, properties=Properties(request_problem_information=0))
    try:
        raw.send_packet(Publish(f"{uid}/nobody", b"x", qos=1, packet_id=1))  # 0x10
        raw.send_packet(Subscribe(2, [SubscriptionRequest(f"{uid}/#/bad", 0)]))  # 0x8F
        raw.send_packet(Unsubscribe(3, [f"{uid}/never"]))  # 0x11
        for _ in range(3):
            ack = raw.read_packet()
            assert ack is not None and getattr(ack, "reason_codes", [1]) != [0]
            props = getattr(ack, "properties", None)
            assert props is None or (props.reason_string is None and not props.user_properties)
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-2.2.2-1")
def test_no_properties_is_a_property_length_of_zero(broker: BrokerProcess, uid: str) -> None:
    raw = connected(broker.port, uid)
    try:
        raw.send(b"\x82\x07\x12\x34\x00\x00\x01t\x01")  # SUBSCRIBE "t" QoS 1
        raw.sock.settimeout(10)
        assert raw.sock.recv(6) == b"\x90\x04\x12\x34\x00\x01"
        raw.send(b"\xa2\x06\x43\x21\x00\x00\x01t")  # UNSUBSCRIBE "t"
        assert raw.sock.recv(6) == b"\xb0\x04\x43\x21\x00\x00"
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-4.8.2-4")
def test_shared_delivery_in_flight_is_completed_on_reconnect(
    broker: BrokerProcess, uid: str
) -> None:
    """A QoS 2 message sent to a member whose connection breaks stays with its session: the
    other member never gets it, the member gets it again (DUP) when it resumes, and the
    exchange completes."""
    one, two, pub = _shared_qos2_members(broker, uid, expiry=60)
    try:
        pub.send_packet(Publish(f"{uid}/t", b"x", qos=2, packet_id=1))
        receiver, other, got = _first_receiver(one, two)
        assert got.qos == 2
        was_one = receiver is one
        receiver.close()  # no PUBREC; the session stays
        assert other.read_nothing(1.5)
        receiver, ack = resumable(broker.port, f"{uid}-{1 if was_one else 2}", clean_start=False)
        one, two = (receiver, two) if was_one else (one, receiver)
        assert ack.session_present
        again = next_publish(receiver)
        assert (again.payload, again.dup, again.packet_id) == (b"x", True, got.packet_id)
        receive_qos2(receiver, again.packet_id)
        assert receiver.read_nothing(0.3) and other.read_nothing(0.3)
    finally:
        for raw in (one, two, pub):
            end_session(raw)


@pytest.mark.spec("5:MQTT-3.10.4-3", "3:MQTT-3.10.4-3")
@pytest.mark.parametrize("version", [5, 4], ids=["mqtt5", "mqtt311"])
def test_unsubscribe_completes_deliveries_in_flight(
    broker: BrokerProcess, uid: str, version: int
) -> None:
    """A QoS 1 message sent before the UNSUBSCRIBE is still re-sent when the session resumes."""
    sub, _ = resumable(broker.port, f"{uid}-s", clean_start=version == 5, version=version)
    subscribed(sub, f"{uid}/t", 1)
    pub = connected(broker.port, f"{uid}-p", version=version)
    try:
        pub.send_packet(Publish(f"{uid}/t", b"x", qos=1, packet_id=1))
        got = sub.read_packet()
        assert isinstance(got, Publish)
        assert _unsuback(sub, 2, f"{uid}/t") == ([0] if version == 5 else [])
        sub.close()  # the delivery is still unacknowledged
        sub, ack = resumable(broker.port, f"{uid}-s", clean_start=False, version=version)
        assert ack.session_present
        again = sub.read_packet()
        assert isinstance(again, Publish) and (again.packet_id, again.dup) == (got.packet_id, True)
        sub.send_packet(Puback(again.packet_id))
    finally:
        end = Properties(session_expiry_interval=0) if version == 5 else None
        sub.send_packet(Disconnect(0, end))
        sub.close()
        pub.close()
