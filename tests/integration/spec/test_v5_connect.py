"""MQTT 5.0 CONNECT, CONNACK, PINGREQ, DISCONNECT and AUTH statements on a real socket.

Raw bytes where a client library would refuse to send the bad thing; one broker for the module.
"""

from __future__ import annotations

import time

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient, closing_reason, connected, subscribed
from xmq.codec.packets import (
    MQTT_5,
    Auth,
    Connack,
    Connect,
    Disconnect,
    Pingreq,
    Pingresp,
    Publish,
    Will,
)
from xmq.codec.properties import Properties
from xmq.codec.writer import encode

pytestmark = pytest.mark.integration


def _connect_bytes(flags: int, payload: bytes, *, name: bytes = b"MQTT", level: int = 5) -> bytes:
    """A CONNECT with hand-set flags; no properties (MQTT 5) and keep alive 60."""
    header = len(name).to_bytes(2, "big") + name + bytes([level, flags]) + b"\x00\x3c"
    body = header + (b"\x00" if level == 5 else b"") + payload
    assert len(body) < 128
    return bytes([0x10, len(body)]) + body


def _string(text: str) -> bytes:
    data = text.encode()
    return len(data).to_bytes(2, "big") + data


def _refused(broker: BrokerProcess, data: bytes) -> list[object]:
    """Send ``data`` on a fresh connection: every packet until the broker closes it."""
    raw = RawClient(broker.port)
    try:
        raw.send(data)
        return list(raw.read_until_closed())
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-3.1.2-1", "5:MQTT-3.2.2-6", "5:MQTT-3.2.2-7", "5:MQTT-3.14.0-1")
def test_wrong_protocol_name_is_0x84_and_closed(broker: BrokerProcess, uid: str) -> None:
    packets = _refused(broker, _connect_bytes(0x02, _string(uid), name=b"MQTX"))
    assert len(packets) == 1
    ack = packets[0]
    assert isinstance(ack, Connack) and ack.reason_code == 0x84 and not ack.session_present


@pytest.mark.spec("5:MQTT-3.1.2-2", "5:MQTT-3.2.2-6", "5:MQTT-3.2.2-7", "5:MQTT-3.14.0-1")
def test_unknown_protocol_level_is_refused_and_closed(broker: BrokerProcess, uid: str) -> None:
    """Our choice: a level we do not know gets the 3.1.1-form CONNACK 0x01, which a client of
    any version can read (its Session Present is 0), then the connection closes."""
    raw = RawClient(broker.port)
    try:
        raw.send(_connect_bytes(0x02, _string(uid), level=6))
        raw.sock.settimeout(10)
        received = b""
        while chunk := raw.sock.recv(64):
            received += chunk
        assert received == b"\x20\x02\x00\x01"
    finally:
        raw.close()


@pytest.mark.spec(
    "5:MQTT-3.1.2-11", "5:MQTT-3.1.2-12", "5:MQTT-3.1.2-13", "5:MQTT-3.1.4-1", "5:MQTT-3.14.0-1"
)
@pytest.mark.parametrize(
    "flags",
    [0x02 | 0x08, 0x02 | 0x20, 0x02 | 0x04 | 0x18],
    ids=["will-qos-without-will", "will-retain-without-will", "will-qos-3"],
)
def test_inconsistent_will_flags_are_refused(broker: BrokerProcess, uid: str, flags: int) -> None:
    will = b"\x00" + _string(f"{uid}/w") + _string("x") if flags & 0x04 else b""
    packets = _refused(broker, _connect_bytes(flags, _string(uid) + will))
    assert all(isinstance(p, Connack) and p.reason_code >= 0x80 for p in packets), packets


@pytest.mark.spec("5:MQTT-3.1.4-6")
def test_nothing_after_a_refused_connect_is_processed(broker: BrokerProcess, uid: str) -> None:
    watcher = connected(broker.port, f"{uid}-w")
    try:
        subscribed(watcher, f"{uid}/t", 0)
        publish = encode(Publish(f"{uid}/t", b"smuggled"), MQTT_5)
        _refused(broker, _connect_bytes(0x02, _string(f"{uid}-x"), name=b"MQTX") + publish)
        assert watcher.read_nothing(0.5)
    finally:
        watcher.close()


@pytest.mark.spec(
    "5:MQTT-3.1.3-5", "5:MQTT-3.1.4-5", "5:MQTT-3.2.0-1", "5:MQTT-3.2.2-1", "5:MQTT-3.2.2-2"
)
def test_alphanumeric_client_id_is_accepted_with_a_plain_connack(broker: BrokerProcess) -> None:
    client_id = "0123456789abcdefXYZw" + str(time.monotonic_ns() % 1000).zfill(3)
    assert len(client_id) == 23
    raw = RawClient(broker.port)
    try:
        raw.send_packet(Connect(client_id=client_id, clean_start=True))
        raw.sock.settimeout(10)
        data = raw.sock.recv(4)  # fixed header, remaining length, acknowledge flags, reason
        assert data[0] == 0x20  # CONNACK is the first packet
        assert data[2] == 0x00  # flags 7-1 reserved; Session Present 0 with Clean Start 1
        assert data[3] == 0x00
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-3.1.2-6", "5:MQTT-3.2.2-3", "5:MQTT-3.1.4-4")
def test_clean_start_0_without_a_session_creates_one(broker: BrokerProcess, uid: str) -> None:
    expiry = Properties(session_expiry_interval=60)
    first = RawClient(broker.port)
    try:
        ack = first.connect(uid, clean_start=False, properties=expiry)
        assert ack.reason_code == 0 and not ack.session_present
        subscribed(first, f"{uid}/t", 1)
        first.send_packet(Disconnect(0))
    finally:
        first.close()
    again = RawClient(broker.port)
    try:
        ack = again.connect(uid, clean_start=False, properties=expiry)
        assert ack.reason_code == 0 and ack.session_present
    finally:
        again.send_packet(Disconnect(0, Properties(session_expiry_interval=0)))
        again.close()


@pytest.mark.spec(
    "5:MQTT-3.1.0-2",
    "5:MQTT-3.2.0-2",
    "5:MQTT-3.14.2-2",
    "5:MQTT-3.14.4-2",
    "5:MQTT-3.14.4-1",
    "5:MQTT-4.13.2-1",
)
def test_second_connect_gets_no_second_connack(broker: BrokerProcess, uid: str) -> None:
    raw = connected(broker.port, uid)
    try:
        raw.send_packet(Connect(client_id=uid))
        packets = raw.read_until_closed()
        assert not [p for p in packets if isinstance(p, Connack)]
        [disconnect] = packets
        assert isinstance(disconnect, Disconnect) and disconnect.reason_code == 0x82
        assert (
            disconnect.properties is None or disconnect.properties.session_expiry_interval is None
        )
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-3.1.3-6", "5:MQTT-3.1.3-7", "5:MQTT-3.2.2-16")
def test_assigned_client_identifiers_are_unique(broker: BrokerProcess) -> None:
    clients = [RawClient(broker.port) for _ in range(3)]
    try:
        assigned = set()
        for raw in clients:
            ack = raw.connect("")
            assert ack.reason_code == 0 and ack.properties is not None
            assert ack.properties.assigned_client_identifier
            assigned.add(ack.properties.assigned_client_identifier)
        assert len(assigned) == 3
    finally:
        for raw in clients:
            raw.close()


@pytest.mark.spec("5:MQTT-3.1.2-22", "5:MQTT-3.2.2-22")
def test_client_keep_alive_is_enforced_when_no_server_keep_alive(
    broker: BrokerProcess, uid: str
) -> None:
    raw = RawClient(broker.port)
    try:
        ack = raw.connect(uid, keep_alive=1)
        assert ack.properties is None or ack.properties.server_keep_alive is None
        started = time.monotonic()
        assert closing_reason(raw) == 0x8D  # Keep alive timeout
        assert 1.0 <= time.monotonic() - started < 5
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-3.12.4-1")
def test_pingreq_gets_pingresp(broker: BrokerProcess, uid: str) -> None:
    raw = connected(broker.port, uid)
    try:
        for _ in range(3):
            raw.send_packet(Pingreq())
            assert isinstance(raw.read_packet(), Pingresp)
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-3.1.2-28")
def test_no_response_information_unless_requested(broker: BrokerProcess, uid: str) -> None:
    for request in (None, 0):
        props = Properties() if request is None else Properties(request_response_information=0)
        raw = RawClient(broker.port)
        try:
            ack = raw.connect(f"{uid}-{request}", properties=props)
            assert ack.reason_code == 0
            assert ack.properties is None or ack.properties.response_information is None
        finally:
            raw.close()


@pytest.mark.spec("5:MQTT-3.14.1-1", "5:MQTT-3.15.1-1", "5:MQTT-4.13.1-1")
@pytest.mark.parametrize("data", [b"\xe1\x00", b"\xf1\x00"], ids=["disconnect-flags", "auth-flags"])
def test_reserved_flags_of_disconnect_and_auth(
    broker: BrokerProcess, uid: str, data: bytes
) -> None:
    raw = connected(broker.port, uid)
    try:
        raw.send(data)
        assert closing_reason(raw) == 0x81
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-4.12.0-7", "5:MQTT-4.12.0-6")
def test_auth_without_an_authentication_method_is_a_protocol_error(
    broker: BrokerProcess, uid: str
) -> None:
    raw = RawClient(broker.port)
    try:
        ack = raw.connect(uid)
        assert ack.properties is None or ack.properties.authentication_method is None
        raw.send_packet(Auth(0x19))
        assert closing_reason(raw) == 0x82
    finally:
        raw.close()


@pytest.mark.spec("5:MQTT-4.12.0-1", "5:MQTT-3.2.2-7")
def test_unsupported_authentication_method_is_refused(broker: BrokerProcess, uid: str) -> None:
    packets = _refused(
        broker,
        encode(
            Connect(client_id=uid, properties=Properties(authentication_method="NOPE-1")), MQTT_5
        ),
    )
    [ack] = packets
    assert isinstance(ack, Connack) and ack.reason_code in (0x8C, 0x87)


def _will_client(broker: BrokerProcess, client_id: str, topic: str, retain: bool) -> RawClient:
    raw = RawClient(broker.port)
    will = Will(topic, b"gone", qos=1, retain=retain, properties=Properties())
    assert will.properties is not None
    will.properties.user_properties = [("z", "1"), ("a", "2"), ("z", "0")]
    raw.send_packet(Connect(client_id=client_id, will=will, keep_alive=60))
    ack = raw.read_packet()
    assert isinstance(ack, Connack) and ack.reason_code == 0
    return raw


@pytest.mark.spec("5:MQTT-3.1.2-7", "5:MQTT-3.1.2-14", "5:MQTT-3.1.3-10", "5:MQTT-3.1.2-10")
def test_will_is_published_not_retained_with_its_user_properties(
    broker: BrokerProcess, uid: str
) -> None:
    watcher = connected(broker.port, f"{uid}-w")
    try:
        subscribed(watcher, f"{uid}/will", 1)
        _will_client(broker, f"{uid}-c", f"{uid}/will", retain=False).close()  # network loss
        got = watcher.read_packet()
        assert isinstance(got, Publish) and got.payload == b"gone" and not got.retain
        assert got.properties is not None
        assert got.properties.user_properties == [("z", "1"), ("a", "2"), ("z", "0")]
        assert watcher.read_nothing(0.3)  # published once, then gone from the session
        late = connected(broker.port, f"{uid}-late")
        try:
            subscribed(late, f"{uid}/will", 1)
            assert late.read_nothing(0.3)  # and not retained
        finally:
            late.close()
    finally:
        watcher.close()


@pytest.mark.spec("5:MQTT-3.1.2-15")
def test_will_retain_publishes_a_retained_will(broker: BrokerProcess, uid: str) -> None:
    _will_client(broker, f"{uid}-c", f"{uid}/will", retain=True).close()
    late = connected(broker.port, f"{uid}-late")
    try:
        late.send_packet(Pingreq())  # wait until the will had time to be published
        assert isinstance(late.read_packet(), Pingresp)
        deadline = time.monotonic() + 5
        while True:
            late_sub = connected(broker.port, f"{uid}-s{time.monotonic_ns()}")
            try:
                subscribed(late_sub, f"{uid}/will", 1)
                if not late_sub.read_nothing(0.3):
                    got = late_sub.read_packet()
                    assert isinstance(got, Publish) and got.payload == b"gone" and got.retain
                    return
            finally:
                late_sub.close()
            assert time.monotonic() < deadline, "the retained will never arrived"
    finally:
        late.close()


@pytest.mark.spec("5:MQTT-4.7.0-1", "5:MQTT-4.7.3-1", "5:MQTT-3.3.2-2", "5:MQTT-3.2.2-7")
@pytest.mark.parametrize("topic", ["w/+", "w/#", "+", ""], ids=["plus", "hash", "alone", "empty"])
def test_a_will_topic_is_a_topic_name(broker: BrokerProcess, uid: str, topic: str) -> None:
    """It used to be accepted with wildcards (and empty): now CONNACK 0x90 Topic Name invalid."""
    packets = _refused(broker, encode(Connect(client_id=uid, will=Will(topic, b"x")), MQTT_5))
    [ack] = packets
    assert isinstance(ack, Connack) and ack.reason_code == 0x90


@pytest.mark.spec("5:MQTT-3.1.3-4", "5:MQTT-3.1.3-11", "5:MQTT-3.1.3-12", "5:MQTT-1.5.4-1")
@pytest.mark.parametrize(
    ("flags", "payload"),
    [
        (0x02, b"\x00\x01\xff"),
        (0x06, b"\x00\x01w\x00\x00\x01\xff\x00\x01x"),
        (0x82, b"\x00\x01u\x00\x01\xff"),
    ],
    ids=["client-id", "will-topic", "user-name"],
)
def test_connect_strings_must_be_utf8(broker: BrokerProcess, flags: int, payload: bytes) -> None:
    [ack] = _refused(broker, _connect_bytes(flags, payload))
    assert isinstance(ack, Connack) and ack.reason_code == 0x81
