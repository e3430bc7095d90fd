"""Property-based tests: decode(encode(p)) == p for every packet type, every property and
every protocol version; and a fuzz target whose invariant is that only ProtocolError
subclasses escape PacketReader.feed."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xmq.codec.errors import ProtocolError
from xmq.codec.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    PacketIdAck,
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
from xmq.codec.properties import (
    ALLOWED_PROPERTIES,
    BOOLEAN_PROPERTIES,
    PROPERTY_TABLE,
    WILL_PROPERTIES,
    Properties,
    PropertyId,
    PropertyKind,
)
from xmq.codec.reader import PacketReader
from xmq.codec.reason_codes import (
    AUTH_REASONS,
    CONNACK_REASONS,
    DISCONNECT_REASONS,
    PUBACK_REASONS,
    PUBREL_REASONS,
    SUBACK_REASONS,
    SUBACK_V311_REASONS,
    UNSUBACK_REASONS,
)
from xmq.codec.writer import encode

SETTINGS = settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

VERSIONS = st.sampled_from([3, 4, 5])
MQTT_TEXT = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
    max_size=12,
)
U16 = st.integers(0, 0xFFFF)
U32 = st.integers(0, 0xFFFF_FFFF)
PACKET_ID = st.integers(1, 0xFFFF)
SUBSCRIPTION_ID = st.integers(1, 268_435_455)


def _value_strategy(pid: int, packet_type: int) -> st.SearchStrategy[Any]:
    kind = PROPERTY_TABLE[pid][1]
    if pid in BOOLEAN_PROPERTIES:
        return st.integers(0, 1)
    if pid == PropertyId.RECEIVE_MAXIMUM:
        return st.integers(1, 0xFFFF)
    if pid == PropertyId.MAXIMUM_PACKET_SIZE:
        return st.integers(1, 0xFFFF_FFFF)
    if pid == PropertyId.SUBSCRIPTION_IDENTIFIER:
        size = 1 if packet_type == 8 else 3
        return st.lists(SUBSCRIPTION_ID, min_size=1, max_size=size)
    if pid == PropertyId.USER_PROPERTY:
        return st.lists(st.tuples(MQTT_TEXT, MQTT_TEXT), min_size=1, max_size=3)
    strategies: dict[PropertyKind, st.SearchStrategy[Any]] = {
        PropertyKind.BYTE: st.integers(0, 255),
        PropertyKind.U16: U16,
        PropertyKind.U32: U32,
        PropertyKind.STRING: MQTT_TEXT,
        PropertyKind.BINARY: st.binary(max_size=12),
    }
    return strategies[kind]


@st.composite
def properties_for(draw: st.DrawFn, packet_type: int) -> Properties | None:
    """Any subset of the properties the packet type may carry (None when the subset is empty,
    which is how the decoder reports an empty property list)."""
    allowed = sorted(ALLOWED_PROPERTIES[packet_type])
    chosen = draw(st.lists(st.sampled_from(allowed), unique=True)) if allowed else []
    if not chosen:
        return None
    props = Properties()
    for pid in chosen:
        setattr(props, PROPERTY_TABLE[pid][0], draw(_value_strategy(pid, packet_type)))
    if props.authentication_data is not None and props.authentication_method is None:
        props.authentication_method = draw(MQTT_TEXT)
    return props


def _props(version: int, packet_type: int) -> st.SearchStrategy[Properties | None]:
    return properties_for(packet_type) if version == 5 else st.none()


@st.composite
def connects(draw: st.DrawFn, version: int) -> Connect:
    will = None
    if draw(st.booleans()):
        will = Will(
            draw(MQTT_TEXT),
            draw(st.binary(max_size=20)),
            draw(st.integers(0, 2)),
            draw(st.booleans()),
            draw(_props(version, WILL_PROPERTIES)),
        )
    username = draw(st.none() | MQTT_TEXT)
    password = draw(st.none() | st.binary(max_size=10))
    if version < 5 and username is None:
        password = None
    return Connect(
        protocol_name="MQIsdp" if version == 3 else "MQTT",
        protocol_version=version,
        clean_start=draw(st.booleans()),
        keep_alive=draw(U16),
        client_id=draw(MQTT_TEXT),
        properties=draw(_props(version, 1)),
        will=will,
        username=username,
        password=password,
    )


@st.composite
def publishes(draw: st.DrawFn, version: int) -> Publish:
    qos = draw(st.integers(0, 2))
    return Publish(
        draw(MQTT_TEXT),
        draw(st.binary(max_size=300)),
        qos,
        draw(st.booleans()),
        draw(st.booleans()) if qos else False,
        draw(PACKET_ID) if qos else 0,
        draw(_props(version, 3)),
    )


def _codes(version: int, v5: frozenset[int], v311: frozenset[int]) -> st.SearchStrategy[int]:
    return st.sampled_from(sorted(v5 if version == 5 else v311))


@st.composite
def acks(draw: st.DrawFn, version: int) -> PacketIdAck:
    cls, ptype, reasons = draw(
        st.sampled_from(
            [
                (Puback, 4, PUBACK_REASONS),
                (Pubrec, 5, PUBACK_REASONS),
                (Pubrel, 6, PUBREL_REASONS),
                (Pubcomp, 7, PUBREL_REASONS),
            ]
        )
    )
    if version < 5:
        return cls(draw(PACKET_ID))
    return cls(draw(PACKET_ID), draw(st.sampled_from(sorted(reasons))), draw(properties_for(ptype)))


@st.composite
def subscribes(draw: st.DrawFn, version: int) -> Subscribe:
    if version == 5:
        request = st.builds(
            SubscriptionRequest,
            MQTT_TEXT,
            st.integers(0, 2),
            st.booleans(),
            st.booleans(),
            st.integers(0, 2),
        )
    else:
        request = st.builds(SubscriptionRequest, MQTT_TEXT, st.integers(0, 2))
    return Subscribe(
        draw(PACKET_ID), draw(st.lists(request, min_size=1, max_size=4)), draw(_props(version, 8))
    )


def packets(version: int) -> st.SearchStrategy[Packet]:
    """Every packet type valid for ``version``."""
    choices: list[st.SearchStrategy[Any]] = [
        connects(version),
        st.builds(
            Connack,
            st.booleans(),
            _codes(version, CONNACK_REASONS, frozenset(range(6))),
            _props(version, 2),
        ),
        publishes(version),
        acks(version),
        subscribes(version),
        st.builds(
            Suback,
            PACKET_ID,
            st.lists(_codes(version, SUBACK_REASONS, SUBACK_V311_REASONS), min_size=1, max_size=4),
            _props(version, 9),
        ),
        st.builds(
            Unsubscribe, PACKET_ID, st.lists(MQTT_TEXT, min_size=1, max_size=4), _props(version, 10)
        ),
        st.builds(
            Unsuback,
            PACKET_ID,
            st.lists(st.sampled_from(sorted(UNSUBACK_REASONS)), min_size=1, max_size=4)
            if version == 5
            else st.just([]),
            _props(version, 11),
        ),
        st.just(Pingreq()),
        st.just(Pingresp()),
        st.builds(Disconnect, st.sampled_from(sorted(DISCONNECT_REASONS)), _props(version, 14))
        if version == 5
        else st.just(Disconnect()),
    ]
    if version == 5:
        choices.append(st.builds(Auth, st.sampled_from(sorted(AUTH_REASONS)), _props(version, 15)))
    return st.one_of(choices)


@st.composite
def versioned_packets(draw: st.DrawFn) -> tuple[int, Packet]:
    version = draw(VERSIONS)
    return version, draw(packets(version))


@SETTINGS
@given(versioned_packets())
def test_round_trip(case: tuple[int, Packet]) -> None:
    version, packet = case
    data = encode(packet, version)
    reader = PacketReader(protocol_version=version)
    assert reader.feed(data) == [packet]
    assert reader.buffered == 0


@SETTINGS
@given(versioned_packets(), st.data())
def test_round_trip_in_random_chunks(case: tuple[int, Packet], data: st.DataObject) -> None:
    version, packet = case
    stream = encode(packet, version) + encode(Pingreq(), version)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    reader = PacketReader(protocol_version=version)
    got: list[Packet] = []
    for start, stop in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got += reader.feed(stream[start:stop])
    assert got == [packet, Pingreq()]


@SETTINGS
@given(st.lists(versioned_packets(), min_size=1, max_size=5))
def test_round_trip_stream_after_connect(cases: list[tuple[int, Packet]]) -> None:
    """A server reader learns the version from CONNECT and reads what follows with it."""
    version = cases[0][0]
    follow = [p for v, p in cases if v == version and not isinstance(p, Connect)]
    connect = Connect(protocol_name="MQIsdp" if version == 3 else "MQTT", protocol_version=version)
    stream = encode(connect, version) + b"".join(encode(p, version) for p in follow)
    reader = PacketReader()
    assert reader.feed(stream) == [connect, *follow]
    assert reader.protocol_version == version


# --- fuzzing ------------------------------------------------------------------------------

# XMQ_FUZZ_EXAMPLES=20000 for a long local fuzzing run; the default keeps CI quick.
FUZZ_SETTINGS = settings(
    max_examples=int(os.environ.get("XMQ_FUZZ_EXAMPLES", "200")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _feed_expecting_only_protocol_errors(
    data: bytes, version: int, max_packet_size: int, chunk: int
) -> None:
    reader = PacketReader(max_packet_size=max_packet_size, protocol_version=version)
    try:
        for start in range(0, len(data), chunk):
            for packet in reader.feed(data[start : start + chunk]):
                # Whatever decodes must encode again without crashing the encoder's invariants.
                assert packet is not None
    except ProtocolError as exc:
        assert isinstance(exc.reason_code, int)
        assert 0x80 <= exc.reason_code <= 0xA2


@FUZZ_SETTINGS
@given(
    st.binary(max_size=400),
    st.sampled_from([0, 3, 4, 5]),
    st.sampled_from([16, 1000, 268_435_460]),
    st.sampled_from([1, 5, 4096]),
)
def test_fuzz_random_bytes(data: bytes, version: int, max_size: int, chunk: int) -> None:
    _feed_expecting_only_protocol_errors(data, version, max_size, chunk)


@FUZZ_SETTINGS
@given(
    st.sampled_from([3, 4, 5]),
    st.integers(0, 15),
    st.binary(max_size=120),
)
def test_fuzz_valid_fixed_header_random_body(version: int, ptype: int, body: bytes) -> None:
    """Well-formed fixed header (right flags, right length), random body."""
    flags = 2 if ptype in (6, 8, 10) else 0
    header = bytes((ptype << 4 | flags, len(body)))
    _feed_expecting_only_protocol_errors(header + body, version, 268_435_460, 4096)


MUTATIONS = st.sampled_from(["flip", "set", "insert", "delete", "truncate", "duplicate"])


@FUZZ_SETTINGS
@given(versioned_packets(), st.lists(st.tuples(MUTATIONS, st.integers(0), st.integers(0, 255))))
def test_fuzz_mutated_valid_packets(
    case: tuple[int, Packet], mutations: list[tuple[str, int, int]]
) -> None:
    version, packet = case
    data = bytearray(encode(packet, version))
    for kind, where, value in mutations:
        if not data:
            break
        index = where % len(data)
        if kind == "flip":
            data[index] ^= 1 << (value % 8)
        elif kind == "set":
            data[index] = value
        elif kind == "insert":
            data.insert(index, value)
        elif kind == "delete":
            del data[index]
        elif kind == "truncate":
            del data[index:]
        else:
            data += data[index:]
    for chunk in (1, 4096):
        _feed_expecting_only_protocol_errors(bytes(data), version, 268_435_460, chunk)


_FULL = Properties(
    payload_format_indicator=1,
    message_expiry_interval=60,
    content_type="text/plain",
    response_topic="r/t",
    correlation_data=b"cd",
    subscription_identifiers=[5, 300],
    topic_alias=2,
    user_properties=[("k", "v"), ("k", "w")],
)
SAMPLES: list[tuple[str, int, Packet]] = [
    (
        "connect-v5-all",
        5,
        Connect(
            client_id="cid",
            properties=Properties(
                session_expiry_interval=9,
                receive_maximum=5,
                maximum_packet_size=999,
                authentication_method="M",
                authentication_data=b"d",
                user_properties=[("a", "b")],
            ),
            will=Will("w", b"p", 1, True, Properties(will_delay_interval=3, content_type="c")),
            username="u",
            password=b"p",
        ),
    ),
    (
        "connect-v311-all",
        4,
        Connect(
            protocol_version=4, client_id="c", will=Will("w", b"p"), username="u", password=b"x"
        ),
    ),
    ("connect-v31", 3, Connect(protocol_name="MQIsdp", protocol_version=3, client_id="c")),
    ("connack-v5", 5, Connack(True, 0, Properties(assigned_client_identifier="id", maximum_qos=1))),
    ("publish-v5-props", 5, Publish("a/b/c", b"payload", 1, True, False, 9, _FULL)),
    ("publish-v311-qos2", 4, Publish("a/b/é", b"payload", 2, False, True, 300)),
    ("puback-v5", 5, Puback(1, 0x10, Properties(reason_string="why"))),
    ("pubrel-v5", 5, Pubrel(2, 0x92)),
    (
        "subscribe-v5",
        5,
        Subscribe(
            7,
            [SubscriptionRequest("a/+", 1, True, False, 1), SubscriptionRequest("#", 2)],
            Properties(subscription_identifiers=[4]),
        ),
    ),
    ("subscribe-v311", 4, Subscribe(7, [SubscriptionRequest("a/+", 1)])),
    ("suback-v5", 5, Suback(7, [0, 1, 0x80], Properties(reason_string="r"))),
    ("unsubscribe-v5", 5, Unsubscribe(8, ["a", "b/#"], Properties(user_properties=[("x", "y")]))),
    ("unsuback-v5", 5, Unsuback(8, [0, 0x11])),
    ("disconnect-v5", 5, Disconnect(0x8E, Properties(server_reference="s", reason_string="r"))),
    ("auth-v5", 5, Auth(0x18, Properties(authentication_method="SCRAM", authentication_data=b"x"))),
]
_BYTE_VALUES = (0x00, 0x01, 0x7F, 0x80, 0xC3, 0xFF)


@pytest.mark.parametrize(("name", "version", "packet"), SAMPLES, ids=[s[0] for s in SAMPLES])
def test_every_single_byte_mutation_raises_only_protocol_errors(
    name: str, version: int, packet: Packet
) -> None:
    """Exhaustive: every position set to each interesting byte value, bit-flipped, deleted,
    and the packet truncated there (with a PINGREQ after it to resynchronise)."""
    original = encode(packet, version)
    assert PacketReader(protocol_version=version).feed(original) == [packet]
    for index in range(len(original)):
        variants = [
            original[:index] + bytes((value,)) + original[index + 1 :] for value in _BYTE_VALUES
        ]
        variants += [
            original[:index] + bytes((original[index] ^ (1 << bit),)) + original[index + 1 :]
            for bit in range(8)
        ]
        variants.append(original[:index] + original[index + 1 :])
        variants.append(original[:index] + b"\xc0\x00")
        for variant in variants:
            _feed_expecting_only_protocol_errors(variant, version, 268_435_460, 4096)
