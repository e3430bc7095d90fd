"""Reason code mappings, the Properties record, errors, and encoder details."""

from __future__ import annotations

import pytest

from xmq.codec.errors import (
    MalformedPacket,
    PacketTooLarge,
    PayloadFormatInvalid,
    ProtocolError,
    ProtocolViolation,
    TopicAliasInvalid,
    UnsupportedProtocolVersion,
)
from xmq.codec.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    PacketType,
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
from xmq.codec.properties import (
    ALLOWED_PROPERTIES,
    PROPERTY_NAMES,
    PROPERTY_TABLE,
    WILL_PROPERTIES,
    Properties,
    PropertyId,
    blank_properties,
)
from xmq.codec.reader import PacketReader
from xmq.codec.reason_codes import ReasonCode, connack_v311_code, suback_v311_code
from xmq.codec.writer import encode, encode_publish_parts, encode_varint


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (0x00, 0),
        (0x84, 1),
        (0x85, 2),
        (0x86, 4),
        (0x87, 5),
        (0x8A, 5),
        (0x8C, 4),
        (0x88, 3),
        (0x89, 3),
        (0x97, 3),
        (0x9F, 3),
        (0x8B, 3),
        (0x9C, 3),
        (0x80, 3),
    ],
    ids=lambda v: f"0x{v:02x}",
)
def test_connack_v311_code(reason: int, expected: int) -> None:
    assert connack_v311_code(reason) == expected


@pytest.mark.parametrize(
    ("reason", "expected"),
    [(0, 0), (1, 1), (2, 2), (0x80, 0x80), (0x87, 0x80), (0x8F, 0x80), (0xA2, 0x80)],
    ids=lambda v: f"0x{v:02x}",
)
def test_suback_v311_code(reason: int, expected: int) -> None:
    assert suback_v311_code(reason) == expected


def test_every_mqtt5_reason_code_is_defined() -> None:
    expected = {0x00, 0x01, 0x02, 0x04, 0x10, 0x11, 0x18, 0x19} | set(range(0x80, 0xA3))
    assert {int(code) for code in ReasonCode} == expected
    assert int(ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED) == 0xA2
    assert ReasonCode["NORMAL_DISCONNECTION"] is ReasonCode["SUCCESS"]
    assert int(ReasonCode.SUCCESS) == 0


def test_property_ids_and_slots() -> None:
    assert len(PropertyId) == 27
    assert len(PROPERTY_NAMES) == 27
    # slotted in the pure build, a native class (no __slots__ attribute) in the compiled one
    assert set(getattr(Properties, "__slots__", PROPERTY_NAMES)) == set(PROPERTY_NAMES)
    props = Properties()
    assert not hasattr(props, "__dict__")
    assert all(getattr(props, name) is None for name in PROPERTY_NAMES)
    assert props.is_empty()
    with pytest.raises(AttributeError):
        props.not_a_property = 1  # type: ignore[attr-defined]
    blank = blank_properties()
    assert blank == props
    assert all(getattr(blank, name) is None for name in PROPERTY_NAMES)


def test_properties_equality_repr_copy() -> None:
    a = Properties(reason_string="r", user_properties=[("k", "v")], subscription_identifiers=[1])
    b = Properties(reason_string="r", user_properties=[("k", "v")], subscription_identifiers=[1])
    assert a == b
    assert a != Properties(reason_string="r")
    assert repr(a) == (
        "Properties(subscription_identifiers=[1], reason_string='r', user_properties=[('k', 'v')])"
    )
    clone = a.copy()
    assert clone == a and clone is not a
    assert clone.user_properties is not None and clone.subscription_identifiers is not None
    clone.user_properties.append(("x", "y"))
    clone.subscription_identifiers.append(2)
    assert a.user_properties == [("k", "v")] and a.subscription_identifiers == [1]
    assert not a.is_empty()


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (MalformedPacket, 0x81),
        (ProtocolViolation, 0x82),
        (UnsupportedProtocolVersion, 0x84),
        (PacketTooLarge, 0x95),
        (TopicAliasInvalid, 0x94),
        (PayloadFormatInvalid, 0x99),
    ],
    ids=["malformed", "protocol-error", "unsupported-version", "too-large", "alias", "payload"],
)
def test_error_defaults_and_override(cls: type[ProtocolError], code: int) -> None:
    assert issubclass(cls, ProtocolError)
    assert cls("m").reason_code == code
    assert cls("m", 0x83).reason_code == 0x83
    assert cls.reason_code == code
    assert cls("msg").message == "msg"


@pytest.mark.parametrize(
    "value",
    [0, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152, 268_435_455],
    ids=str,
)
def test_encode_varint_boundaries(value: int) -> None:
    encoded = encode_varint(value)
    size = 1 if value < 128 else 2 if value < 16_384 else 3 if value < 2_097_152 else 4
    assert len(encoded) == size
    decoded, shift = 0, 0
    for byte in encoded:
        decoded |= (byte & 0x7F) << shift
        shift += 7
    assert decoded == value
    assert encoded[-1] < 0x80 and all(b >= 0x80 for b in encoded[:-1])


@pytest.mark.parametrize("value", [-1, 268_435_456], ids=str)
def test_encode_varint_out_of_range(value: int) -> None:
    with pytest.raises(ValueError):
        encode_varint(value)


PARTS_CASES = [
    (qos, version, props)
    for qos in (0, 1, 2)
    for version in (4, 5)
    for props in (None, Properties(message_expiry_interval=5, user_properties=[("a", "b")]))
    if not (version == 4 and props is not None)
]


@pytest.mark.parametrize(
    ("qos", "version", "props"),
    PARTS_CASES,
    ids=[f"qos{q}-v{v}-{'props' if p else 'noprops'}" for q, v, p in PARTS_CASES],
)
def test_encode_publish_parts_matches_encode(
    qos: int, version: int, props: Properties | None
) -> None:
    head, tail = encode_publish_parts("t/x", b"payload", qos, True, props, version)
    packet_id = 0x1234 if qos else 0
    data = head + packet_id.to_bytes(2, "big") + tail if qos else head + tail
    packet = Publish("t/x", b"payload", qos, True, False, packet_id, props)
    assert data == encode(packet, version)
    if qos:
        redelivery = bytes((head[0] | 0x08,)) + data[1:]
        decoded = PacketReader(protocol_version=version).feed(redelivery)
        assert decoded == [Publish("t/x", b"payload", qos, True, True, packet_id, props)]


def test_v311_encoding_drops_what_the_wire_cannot_carry() -> None:
    props = Properties(reason_string="r")
    assert encode(Puback(5, 0x10, props), 4) == b"\x40\x02\x00\x05"
    assert encode(Pubrel(5, 0x92), 4) == b"\x62\x02\x00\x05"
    assert encode(Disconnect(0x8E, props), 4) == b"\xe0\x00"
    assert encode(Unsuback(5, [0x11]), 4) == b"\xb0\x02\x00\x05"
    assert encode(Publish("t", b"", properties=props), 4) == b"\x30\x03\x00\x01t"


def test_v311_encoding_maps_mqtt5_codes() -> None:
    assert encode(Connack(reason_code=0x86), 4) == b"\x20\x02\x00\x04"
    assert encode(Connack(reason_code=0x05), 4) == b"\x20\x02\x00\x05"
    assert encode(Suback(3, [1, 0x87, 2]), 4) == b"\x90\x05\x00\x03\x01\x80\x02"


def test_auth_cannot_be_encoded_before_v5() -> None:
    with pytest.raises(ValueError):
        encode(Auth(), 4)


def test_packet_type_values() -> None:
    assert [int(t) for t in PacketType] == list(range(1, 16))
    assert Publish.packet_type == PacketType.PUBLISH
    assert Pubrel(1).packet_type == PacketType.PUBREL


_SAMPLE_VALUES: dict[str, object] = {
    "payload_format_indicator": 1,
    "message_expiry_interval": 0xFFFF_FFFF,
    "content_type": "application/json",
    "response_topic": "reply/to",
    "correlation_data": b"\x00\xffcorr",
    "session_expiry_interval": 3600,
    "assigned_client_identifier": "auto-1",
    "server_keep_alive": 120,
    "authentication_method": "SCRAM-SHA-256",
    "authentication_data": b"\x01\x02",
    "request_problem_information": 0,
    "will_delay_interval": 30,
    "request_response_information": 1,
    "response_information": "resp/",
    "server_reference": "other:1883",
    "reason_string": "because",
    "receive_maximum": 65_535,
    "topic_alias_maximum": 10,
    "topic_alias": 7,
    "maximum_qos": 1,
    "retain_available": 0,
    "maximum_packet_size": 268_435_460,
    "wildcard_subscription_available": 1,
    "subscription_identifier_available": 0,
    "shared_subscription_available": 1,
}


def _every_allowed_property(packet_type: int) -> Properties:
    props = Properties()
    for pid in ALLOWED_PROPERTIES[packet_type]:
        name = PROPERTY_TABLE[pid][0]
        if name == "user_properties":
            props.user_properties = [("dup", "1"), ("dup", "2"), ("ünï", "çødé")]
        elif name == "subscription_identifiers":
            props.subscription_identifiers = [268_435_455] if packet_type == 8 else [1, 128, 16_384]
        else:
            setattr(props, name, _SAMPLE_VALUES[name])
    return props


def _packet_with(packet_type: int, props: Properties) -> Packet:
    builders: dict[int, Packet] = {
        1: Connect(client_id="c", properties=props),
        2: Connack(True, 0, props),
        3: Publish("t", b"p", 1, False, False, 1, props),
        4: Puback(1, 0x10, props),
        5: Pubrec(1, 0x80, props),
        6: Pubrel(1, 0x92, props),
        7: Pubcomp(1, 0, props),
        8: Subscribe(1, [SubscriptionRequest("a/#", 1)], props),
        9: Suback(1, [0, 0x97], props),
        10: Unsubscribe(1, ["a/#"], props),
        11: Unsuback(1, [0x11], props),
        14: Disconnect(0x04, props),
        15: Auth(0x19, props),
    }
    return builders[packet_type]


_TYPES_WITH_PROPERTIES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14, 15]


@pytest.mark.parametrize(
    "packet_type", _TYPES_WITH_PROPERTIES, ids=[PacketType(t).name for t in _TYPES_WITH_PROPERTIES]
)
def test_round_trip_with_every_allowed_property(packet_type: int) -> None:
    packet = _packet_with(packet_type, _every_allowed_property(packet_type))
    assert PacketReader(protocol_version=5).feed(encode(packet, 5)) == [packet]


def test_will_round_trip_with_every_will_property() -> None:
    will = Will("w", b"gone", 2, True, _every_allowed_property(WILL_PROPERTIES))
    packet = Connect(client_id="c", will=will)
    assert PacketReader().feed(encode(packet, 5)) == [packet]


def test_encoder_leaves_out_properties_the_packet_may_not_carry() -> None:
    props = Properties(reason_string="r", topic_alias=3, session_expiry_interval=5)
    decoded = PacketReader(protocol_version=5).feed(encode(Puback(1, 0x10, props), 5))
    assert decoded == [Puback(1, 0x10, Properties(reason_string="r"))]
