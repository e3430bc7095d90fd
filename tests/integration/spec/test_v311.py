"""MQTT 3.1.1 statements binding the server, on a raw socket (one broker for the module).

MQTT 3.1.1 has no DISCONNECT from the server: every violation is answered by closing.
"""

from __future__ import annotations

import time

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient, connected, next_publish, subscribed
from xmq.codec.packets import (
    Connack,
    Connect,
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
    Unsuback,
    Unsubscribe,
    Will,
)

pytestmark = pytest.mark.integration

V311 = 4


def _v311(broker: BrokerProcess, client_id: str) -> RawClient:
    return connected(broker.port, client_id, version=V311)


def _string(text: str) -> bytes:
    data = text.encode()
    return len(data).to_bytes(2, "big") + data


def _connect_bytes(flags: int, payload: bytes, name: bytes = b"MQTT") -> bytes:
    body = _string(name.decode()) + bytes([4, flags]) + b"\x00\x3c" + payload
    return bytes([0x10, len(body)]) + body


def _closed_silently(raw: RawClient) -> bool:
    return raw.read_until_closed() == []


@pytest.mark.spec("3:MQTT-3.1.2-1", "3:MQTT-3.1.4-1")
def test_wrong_protocol_name_closes(broker: BrokerProcess, uid: str) -> None:
    """Our choice: a CONNECT naming another protocol is not processed; the connection closes
    after at most a CONNACK 0x01."""
    raw = RawClient(broker.port, version=V311)
    try:
        raw.send(_connect_bytes(0x02, _string(uid), name=b"MQTX"))
        packets = raw.read_until_closed()
        assert all(isinstance(p, Connack) and p.reason_code == 0x01 for p in packets)
    finally:
        raw.close()


@pytest.mark.spec(
    "3:MQTT-3.1.2-11", "3:MQTT-3.1.2-14", "3:MQTT-3.1.2-22", "3:MQTT-3.1.4-1", "3:MQTT-3.2.2-6"
)
@pytest.mark.parametrize(
    "flags",
    [0x02 | 0x08, 0x02 | 0x20, 0x02 | 0x04 | 0x18, 0x02 | 0x40],
    ids=["will-qos-without-will", "will-retain-without-will", "will-qos-3", "password-no-user"],
)
def test_inconsistent_connect_flags_close_without_connack(
    broker: BrokerProcess, uid: str, flags: int
) -> None:
    will = _string(f"{uid}/w") + _string("x") if flags & 0x04 else b""
    password = _string("pw") if flags & 0x40 else b""
    raw = RawClient(broker.port, version=V311)
    try:
        raw.send(_connect_bytes(flags, _string(uid) + will + password))
        assert _closed_silently(raw)
    finally:
        raw.close()


@pytest.mark.spec(
    "3:MQTT-3.1.3-5", "3:MQTT-3.1.4-4", "3:MQTT-3.2.0-1", "3:MQTT-3.2.2-1", "3:MQTT-3.1.3-6"
)
def test_accepted_connect_gets_a_plain_connack_first(broker: BrokerProcess, uid: str) -> None:
    for client_id in ("0123456789abcdefXYZ" + uid[-4:], ""):
        raw = RawClient(broker.port, version=V311)
        try:
            raw.send_packet(Connect(protocol_version=V311, client_id=client_id, clean_start=True))
            raw.sock.settimeout(10)
            assert raw.sock.recv(4) == b"\x20\x02\x00\x00"
        finally:
            raw.close()


@pytest.mark.spec("3:MQTT-3.2.2-3", "3:MQTT-3.1.2-6", "3:MQTT-3.1.4-3")
def test_session_present_follows_the_stored_state(broker: BrokerProcess, uid: str) -> None:
    def connack(clean: bool) -> Connack:
        raw = RawClient(broker.port, version=V311)
        try:
            ack = raw.connect(uid, clean_start=clean)
            if not clean:
                subscribed(raw, f"{uid}/t", 1)
            raw.send_packet(Disconnect())
            return ack
        finally:
            raw.close()

    assert not connack(clean=False).session_present  # nothing stored yet
    assert connack(clean=True).session_present is False  # state discarded
    assert not connack(clean=False).session_present  # the clean session left nothing behind
    assert connack(clean=False).session_present


@pytest.mark.spec("3:MQTT-3.1.0-2", "3:MQTT-4.8.0-1")
def test_second_connect_closes(broker: BrokerProcess, uid: str) -> None:
    raw = _v311(broker, uid)
    try:
        raw.send_packet(Connect(protocol_version=V311, client_id=uid))
        assert _closed_silently(raw)
    finally:
        raw.close()


@pytest.mark.spec("3:MQTT-3.1.4-2")
def test_a_second_connection_with_the_same_id_closes_the_first(
    broker: BrokerProcess, uid: str
) -> None:
    first = _v311(broker, uid)
    second = _v311(broker, uid)
    try:
        assert _closed_silently(first)
        second.send_packet(Pingreq())
        assert isinstance(second.read_packet(), Pingresp)
    finally:
        first.close()
        second.close()


@pytest.mark.spec(
    "3:MQTT-1.5.3-1",
    "3:MQTT-1.5.3-2",
    "3:MQTT-2.2.2-1",
    "3:MQTT-2.2.2-2",
    "3:MQTT-2.3.1-1",
    "3:MQTT-3.3.1-4",
    "3:MQTT-3.3.2-1",
    "3:MQTT-3.3.2-2",
    "3:MQTT-4.7.1-1",
    "3:MQTT-3.6.1-1",
    "3:MQTT-3.8.1-1",
    "3:MQTT-3.8.3-1",
    "3:MQTT-3.8.3-3",
    "3:MQTT-3.8.3-4",
    "3:MQTT-3.10.1-1",
    "3:MQTT-3.10.3-2",
    "3:MQTT-3.14.1-1",
    "3:MQTT-4.7.3-1",
    "3:MQTT-4.7.3-2",
    "3:MQTT-4.8.0-1",
    "3:MQTT-3.3.1-2",
    "3:MQTT-3.10.3-1",
)
@pytest.mark.parametrize(
    "data",
    [
        b"\x30\x05\x00\x02\xff\xfex",  # topic not UTF-8
        b"\x30\x05\x00\x02\xed\xa0x",  # a surrogate code point
        b"\x30\x05\x00\x02a\x00x",  # U+0000 in the topic
        b"\x30\x04\x00\x01+x",  # wildcard in a topic name
        b"\x30\x03\x00\x00x",  # empty topic name
        b"\x32\x06\x00\x01t\x00\x00x",  # QoS 1 with packet id 0
        b"\x36\x06\x00\x01t\x00\x01x",  # both QoS bits
        b"\x60\x02\x00\x01",  # PUBREL flags 0000
        b"\x80\x06\x00\x01\x00\x01t\x00",  # SUBSCRIBE flags 0000
        b"\x82\x02\x00\x01",  # SUBSCRIBE without a filter
        b"\x82\x06\x00\x01\x00\x01t\x03",  # requested QoS 3
        b"\x82\x06\x00\x01\x00\x01t\x04",  # reserved bits in the requested QoS byte
        b"\x82\x06\x00\x01\x00\x01\xff\x00",  # filter not UTF-8
        b"\xa0\x05\x00\x01\x00\x01t",  # UNSUBSCRIBE flags 0000
        b"\xa2\x02\x00\x01",  # UNSUBSCRIBE without a filter
        b"\xe1\x00",  # DISCONNECT flags
        b"\x38\x04\x00\x01tx",  # DUP on QoS 0
        b"\xa2\x05\x00\x01\x00\x01\xff",  # UNSUBSCRIBE filter not UTF-8
    ],
    ids=[
        "topic-not-utf8",
        "topic-surrogate",
        "topic-nul",
        "topic-wildcard",
        "topic-empty",
        "packet-id-0",
        "qos-3",
        "pubrel-flags",
        "subscribe-flags",
        "subscribe-empty",
        "subscribe-qos-3",
        "subscribe-reserved-bits",
        "filter-not-utf8",
        "unsubscribe-flags",
        "unsubscribe-empty",
        "disconnect-flags",
        "dup-on-qos0",
        "unsubscribe-not-utf8",
    ],
)
def test_violations_close_the_connection(broker: BrokerProcess, uid: str, data: bytes) -> None:
    raw = _v311(broker, uid)
    try:
        raw.send(data)
        assert _closed_silently(raw)
    finally:
        raw.close()


@pytest.mark.spec(
    "3:MQTT-3.3.4-1",
    "3:MQTT-2.3.1-6",
    "3:MQTT-4.3.2-2",
    "3:MQTT-4.3.3-2",
    "3:MQTT-3.12.4-1",
    "3:MQTT-2.3.1-5",
    "3:MQTT-4.3.1-1",
)
def test_publish_flows_and_duplicates(broker: BrokerProcess, uid: str) -> None:
    sub = _v311(broker, f"{uid}-s")
    pub = _v311(broker, f"{uid}-p")
    try:
        subscribed(sub, f"{uid}/t", 0)
        pub.send_packet(Publish(f"{uid}/t", b"0"))
        pub.send_packet(Publish(f"{uid}/t", b"1", qos=1, packet_id=0x0101))
        pub.send_packet(Publish(f"{uid}/t", b"1b", qos=1, packet_id=0x0101, dup=True))
        pub.send_packet(Publish(f"{uid}/t", b"2", qos=2, packet_id=0x0202))
        pub.send_packet(Publish(f"{uid}/t", b"2", qos=2, packet_id=0x0202, dup=True))
        acks = [pub.read_packet() for _ in range(4)]
        assert [(type(a).__name__, getattr(a, "packet_id", 0)) for a in acks] == [
            ("Puback", 0x0101),
            ("Puback", 0x0101),
            ("Pubrec", 0x0202),
            ("Pubrec", 0x0202),
        ]
        pub.send_packet(Pubrel(0x0202))
        comp = pub.read_packet()
        assert isinstance(comp, Pubcomp) and comp.packet_id == 0x0202
        pub.send_packet(Pingreq())
        assert isinstance(pub.read_packet(), Pingresp)
        delivered = [next_publish(sub) for _ in range(4)]
        assert [p.payload for p in delivered] == [b"0", b"1", b"1b", b"2"]  # the QoS 2 one once
        assert {(p.qos, p.dup, p.packet_id) for p in delivered} == {(0, False, 0)}
        assert sub.read_nothing(0.2)
    finally:
        sub.close()
        pub.close()


@pytest.mark.spec(
    "3:MQTT-3.3.1-3",
    "3:MQTT-3.3.5-1",
    "3:MQTT-3.8.4-6",
    "3:MQTT-2.3.1-4",
    "3:MQTT-3.3.2-3",
    "3:MQTT-4.3.2-1",
)
def test_delivery_qos_dup_and_packet_ids(broker: BrokerProcess, uid: str) -> None:
    sub = _v311(broker, f"{uid}-s")
    pub = _v311(broker, f"{uid}-p")
    try:
        sub.send_packet(
            Subscribe(1, [SubscriptionRequest(f"{uid}/+", 1), SubscriptionRequest(f"{uid}/a", 0)])
        )
        ack = sub.read_packet()
        assert isinstance(ack, Suback) and ack.reason_codes == [1, 0]
        pub.send_packet(Publish(f"{uid}/a", b"x", qos=2, packet_id=5, dup=True))
        got = sub.read_packet()
        assert isinstance(got, Publish)
        # the highest QoS of the overlapping subscriptions, capped by the grant; DUP not copied
        assert (got.topic, got.qos, got.dup) == (f"{uid}/a", 1, False)
        assert got.packet_id != 0
        sub.send_packet(Puback(got.packet_id))
    finally:
        sub.close()
        pub.close()


@pytest.mark.spec(
    "3:MQTT-3.8.4-1",
    "3:MQTT-3.8.4-2",
    "3:MQTT-3.8.4-4",
    "3:MQTT-3.8.4-5",
    "3:MQTT-3.9.3-1",
    "3:MQTT-3.9.3-2",
    "3:MQTT-2.3.1-7",
    "3:MQTT-3.8.3-2",
    "3:MQTT-4.7.1-2",
    "3:MQTT-4.7.1-3",
    "3:MQTT-3.10.4-1",
    "3:MQTT-3.10.4-2",
    "3:MQTT-3.10.4-4",
    "3:MQTT-3.10.4-5",
    "3:MQTT-3.10.4-6",
)
def test_suback_and_unsuback(broker: BrokerProcess, uid: str) -> None:
    sub = _v311(broker, f"{uid}-s")
    pub = _v311(broker, f"{uid}-p")
    try:
        requests = [(f"{uid}/#", 2), (f"{uid}/a#", 1), (f"{uid}/+/x", 0), (f"{uid}/b+", 1), ("", 0)]
        sub.send_packet(Subscribe(0xA1, [SubscriptionRequest(f, q) for f, q in requests]))
        ack = sub.read_packet()
        assert isinstance(ack, Suback) and ack.packet_id == 0xA1
        assert ack.reason_codes == [2, 0x80, 0, 0x80, 0x80]
        sub.send_packet(Unsubscribe(0xA2, [f"{uid}/+/x", f"{uid}/q/x", f"{uid}/never"]))
        unsub = sub.read_packet()
        assert isinstance(unsub, Unsuback) and unsub.packet_id == 0xA2
        pub.send_packet(Publish(f"{uid}/q/x", b"via-hash"))  # "#" is still there
        got = sub.read_packet()
        assert isinstance(got, Publish) and got.payload == b"via-hash"
        sub.send_packet(Unsubscribe(0xA3, [f"{uid}/#"]))
        assert isinstance(sub.read_packet(), Unsuback)
        pub.send_packet(Publish(f"{uid}/q/x", b"after"))
        assert sub.read_nothing(0.3)
    finally:
        sub.close()
        pub.close()


@pytest.mark.spec(
    "3:MQTT-3.3.1-5",
    "3:MQTT-3.3.1-6",
    "3:MQTT-3.3.1-7",
    "3:MQTT-3.3.1-8",
    "3:MQTT-3.3.1-9",
    "3:MQTT-3.3.1-10",
    "3:MQTT-3.3.1-11",
    "3:MQTT-3.3.1-12",
    "3:MQTT-3.8.4-3",
)
def test_retained_messages(broker: BrokerProcess, uid: str) -> None:
    pub = _v311(broker, f"{uid}-p")
    live = _v311(broker, f"{uid}-l")
    try:
        subscribed(live, f"{uid}/r", 1)
        pub.send_packet(Publish(f"{uid}/r", b"one", qos=1, packet_id=1, retain=True))
        pub.send_packet(Publish(f"{uid}/r", b"two", qos=0, retain=True))  # QoS 0 replaces it
        pub.send_packet(Publish(f"{uid}/r", b"plain", qos=0))  # not retained: leaves "two"
        got = [next_publish(live) for _ in range(3)]
        assert [(p.payload, p.retain) for p in got] == [
            (b"one", False),
            (b"two", False),
            (b"plain", False),
        ]
        live.send_packet(Puback(got[0].packet_id))
        # the same filter again: the retained message is sent again, with RETAIN 1
        subscribed(live, f"{uid}/r", 1, packet_id=2)
        again = live.read_packet()
        assert isinstance(again, Publish) and (again.payload, again.retain) == (b"two", True)
        assert again.qos == 0
        pub.send_packet(Publish(f"{uid}/r", b"", qos=0, retain=True))  # clear
        cleared = live.read_packet()
        assert isinstance(cleared, Publish) and cleared.payload == b"" and not cleared.retain
        fresh = _v311(broker, f"{uid}-f")
        try:
            subscribed(fresh, f"{uid}/r", 1)
            assert fresh.read_nothing(0.3)
        finally:
            fresh.close()
    finally:
        pub.close()
        live.close()


def _with_will(broker: BrokerProcess, client_id: str, topic: str, retain: bool) -> RawClient:
    raw = RawClient(broker.port, version=V311)
    will = Will(topic, b"gone", qos=1, retain=retain)
    raw.send_packet(Connect(protocol_version=V311, client_id=client_id, will=will, keep_alive=60))
    ack = raw.read_packet()
    assert isinstance(ack, Connack) and ack.reason_code == 0
    return raw


@pytest.mark.spec(
    "3:MQTT-3.1.2-8",
    "3:MQTT-3.1.2-10",
    "3:MQTT-3.1.2-12",
    "3:MQTT-3.1.2-16",
    "3:MQTT-3.1.2-17",
    "3:MQTT-3.14.4-3",
)
def test_wills(broker: BrokerProcess, uid: str) -> None:
    watcher = _v311(broker, f"{uid}-w")
    try:
        subscribed(watcher, f"{uid}/will/#", 1)
        polite = _with_will(broker, f"{uid}-a", f"{uid}/will/a", retain=False)
        polite.send_packet(Disconnect())
        polite.close()
        plain = _v311(broker, f"{uid}-n")  # no will at all
        plain.close()
        assert watcher.read_nothing(0.3)
        _with_will(broker, f"{uid}-b", f"{uid}/will/b", retain=False).close()
        _with_will(broker, f"{uid}-c", f"{uid}/will/c", retain=True).close()
        wills = [next_publish(watcher), next_publish(watcher)]
        got = sorted((p.topic, p.retain) for p in wills)
        assert got == [(f"{uid}/will/b", False), (f"{uid}/will/c", False)]
        assert watcher.read_nothing(0.2)  # each published once
        late = _v311(broker, f"{uid}-late")
        try:
            subscribed(late, f"{uid}/will/#", 1)
            retained = late.read_packet()
            assert isinstance(retained, Publish)
            assert (retained.topic, retained.retain) == (f"{uid}/will/c", True)
            assert late.read_nothing(0.2)
        finally:
            late.close()
    finally:
        watcher.close()


@pytest.mark.spec("3:MQTT-3.1.2-24")
def test_keep_alive_of_one_and_a_half_periods(broker: BrokerProcess, uid: str) -> None:
    raw = RawClient(broker.port, version=V311)
    try:
        ack = raw.connect(uid, keep_alive=1)
        assert ack.reason_code == 0
        started = time.monotonic()
        assert _closed_silently(raw)
        assert 1.0 <= time.monotonic() - started < 5
    finally:
        raw.close()


@pytest.mark.spec(
    "3:MQTT-3.1.2-4",
    "3:MQTT-3.1.2-5",
    "3:MQTT-4.4.0-1",
    "3:MQTT-3.3.1-1",
    "3:MQTT-3.1.3-2",
    "3:MQTT-4.1.0-1",
    "3:MQTT-4.3.3-1",
)
def test_unacknowledged_messages_are_resent_on_resume(broker: BrokerProcess, uid: str) -> None:
    sub = RawClient(broker.port, version=V311)
    ack = sub.connect(f"{uid}-s", clean_start=False)
    assert ack.reason_code == 0
    subscribed(sub, f"{uid}/t", 2)
    pub = _v311(broker, f"{uid}-p")
    try:
        pub.send_packet(Publish(f"{uid}/t", b"in-flight", qos=1, packet_id=1))
        first = sub.read_packet()
        assert isinstance(first, Publish) and not first.dup
        sub.close()  # never acknowledged
        pub.send_packet(Publish(f"{uid}/t", b"offline", qos=2, packet_id=2))
        assert isinstance(pub.read_packet(), Puback)
        assert isinstance(pub.read_packet(), Pubrec)
        pub.send_packet(Pubrel(2))
        assert isinstance(pub.read_packet(), Pubcomp)
        again = RawClient(broker.port, version=V311)
        try:
            assert again.connect(f"{uid}-s", clean_start=False).session_present
            resent = again.read_packet()
            assert isinstance(resent, Publish)
            assert (resent.payload, resent.packet_id, resent.dup) == (
                b"in-flight",
                first.packet_id,
                True,
            )
            queued = again.read_packet()
            assert isinstance(queued, Publish) and (queued.payload, queued.qos) == (b"offline", 2)
            assert queued.packet_id not in (0, first.packet_id)
            again.send_packet(Pubrec(queued.packet_id))
            rel = again.read_packet()
            assert isinstance(rel, Pubrel) and rel.packet_id == queued.packet_id
            again.send_packet(Pubcomp(queued.packet_id))
            assert again.read_nothing(0.2)  # the PUBLISH is not sent again after the PUBREL
        finally:
            again.send_packet(Disconnect())
            again.close()
            cleanup = RawClient(broker.port, version=V311)
            cleanup.connect(f"{uid}-s", clean_start=True)
            cleanup.close()
    finally:
        pub.close()


@pytest.mark.spec("3:MQTT-3.1.4-5", "3:MQTT-3.2.2-4", "3:MQTT-3.2.2-5")
def test_nothing_after_a_refused_connect_is_processed(broker: BrokerProcess, uid: str) -> None:
    watcher = _v311(broker, f"{uid}-w")
    try:
        subscribed(watcher, f"{uid}/t", 0)
        refused = RawClient(broker.port, version=V311)
        try:
            body = _string("MQTT") + bytes([9, 0x02]) + b"\x00\x3c" + _string(f"{uid}-x")
            publish = b"\x30" + bytes([len(uid) + 2 + 2 + 8]) + _string(f"{uid}/t") + b"smuggled"
            refused.send(bytes([0x10, len(body)]) + body + publish)
            refused.sock.settimeout(10)
            received = b""
            while chunk := refused.sock.recv(64):
                received += chunk
            assert received == b"\x20\x02\x00\x01"  # Session Present 0, then closed
        finally:
            refused.close()
        assert watcher.read_nothing(0.5)
    finally:
        watcher.close()


@pytest.mark.spec("3:MQTT-3.3.5-2")
def test_a_publish_that_is_not_allowed_is_acknowledged_and_dropped(
    broker: BrokerProcess, uid: str
) -> None:
    """Our choice: acknowledge it as usual (3.1.1 has no code to refuse it) and drop it."""
    watcher = _v311(broker, f"{uid}-w")
    pub = _v311(broker, f"{uid}-p")
    try:
        subscribed(watcher, "$SYS/forged/#", 0)
        pub.send_packet(Publish("$SYS/forged/x", b"x", qos=1, packet_id=3))
        ack = pub.read_packet()
        assert isinstance(ack, Puback) and ack.packet_id == 3
        assert watcher.read_nothing(0.3)
    finally:
        watcher.close()
        pub.close()


@pytest.mark.spec("3:MQTT-4.7.1-1", "3:MQTT-4.7.3-1", "3:MQTT-3.1.4-1")
@pytest.mark.parametrize("topic", ["w/+", "#", ""], ids=["plus", "hash", "empty"])
def test_a_will_topic_with_wildcards_closes(broker: BrokerProcess, uid: str, topic: str) -> None:
    raw = RawClient(broker.port, version=V311)
    try:
        raw.send_packet(Connect(protocol_version=V311, client_id=uid, will=Will(topic, b"x")))
        assert _closed_silently(raw)
    finally:
        raw.close()


@pytest.mark.spec("3:MQTT-3.1.2-7")
def test_retained_messages_outlive_the_session_that_sent_them(
    broker: BrokerProcess, uid: str
) -> None:
    pub = _v311(broker, f"{uid}-p")  # CleanSession 1: the session ends with the connection
    pub.send_packet(Publish(f"{uid}/r", b"kept", qos=1, packet_id=1, retain=True))
    assert isinstance(pub.read_packet(), Puback)
    pub.send_packet(Disconnect())
    pub.close()
    late = _v311(broker, f"{uid}-late")
    try:
        subscribed(late, f"{uid}/r", 1)
        got = next_publish(late)
        assert (got.payload, got.retain) == (b"kept", True)
    finally:
        late.close()
