"""The load client's hand-encoded packets against the bytes the MQTT specifications give."""

from __future__ import annotations

import pytest

from xmq.bench.packets import (
    CONNACK,
    MQTT_V5,
    MQTT_V311,
    PAYLOAD,
    PUBLISH,
    SUBSCRIBE,
    Frame,
    FrameSplitter,
    MalformedPacketError,
    PublishTemplate,
    decode_connack,
    decode_publish,
    decode_suback,
    decode_varint,
    encode_connect,
    encode_puback,
    encode_publish,
    encode_subscribe,
    encode_varint,
)

PAYLOAD_BYTES = PAYLOAD.pack(123_456_789, 7, 3)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (16_383, b"\xff\x7f"),
        (16_384, b"\x80\x80\x01"),
        (268_435_455, b"\xff\xff\xff\x7f"),
    ],
    ids=["0", "127", "128", "16383", "16384", "max"],
)
def test_varint_matches_spec_table(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert decode_varint(encoded, 0) == (value, len(encoded))


def test_varint_rejects_five_bytes_and_non_minimal() -> None:
    with pytest.raises(MalformedPacketError):
        decode_varint(b"\xff\xff\xff\xff\x01", 0)
    with pytest.raises(MalformedPacketError):
        decode_varint(b"\x80\x00", 0)
    assert decode_varint(b"\x80", 0) is None


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        (
            {"protocol": MQTT_V5},
            bytes.fromhex("100f00044d5154540502012c0000026331"),
        ),
        (
            {"protocol": MQTT_V311},
            bytes.fromhex("100e00044d5154540402012c00026331"),
        ),
        (
            {
                "protocol": MQTT_V5,
                "clean_start": False,
                "session_expiry": 3600,
                "receive_maximum": 10,
            },
            bytes.fromhex("101700044d5154540500012c08110000" + "0e102100" + "0a00026331"),
        ),
        (
            {"protocol": MQTT_V311, "username": "u", "password": b"pw"},
            bytes.fromhex("101500044d51545404c2012c00026331" + "0001750002" + "7077"),
        ),
    ],
    ids=["v5-clean", "v311-clean", "v5-expiry-receive-max", "v311-user-password"],
)
def test_connect_bytes(kwargs: dict[str, object], expected: bytes) -> None:
    assert encode_connect("c1", keepalive=300, **kwargs) == expected  # type: ignore[arg-type]


def test_connect_rejects_unknown_protocol() -> None:
    with pytest.raises(ValueError, match="protocol level"):
        encode_connect("c", protocol=3)


@pytest.mark.parametrize(
    ("protocol", "expected"),
    [
        (MQTT_V5, bytes.fromhex("820900010000036" + "12f6201")),
        (MQTT_V311, bytes.fromhex("8208000100036" + "12f6201")),
    ],
    ids=["v5", "v311"],
)
def test_subscribe_bytes(protocol: int, expected: bytes) -> None:
    assert encode_subscribe(1, ["a/b"], qos=1, protocol=protocol) == expected


def test_subscribe_several_filters_round_trip_through_splitter() -> None:
    packet = encode_subscribe(9, ["x", "$share/g/y/#"], qos=0, protocol=MQTT_V5)
    (frame,) = FrameSplitter().feed(packet)
    assert frame.first_byte == (SUBSCRIBE << 4) | 0x02
    body = frame.body
    assert body[:2] == b"\x00\x09"
    assert body[2] == 0  # no properties
    assert body[3:] == b"\x00\x01x\x00" + b"\x00\x0c$share/g/y/#\x00"


@pytest.mark.parametrize(
    ("qos", "protocol", "expected"),
    [
        (1, MQTT_V5, bytes.fromhex("3216000174000700") + PAYLOAD_BYTES),
        (1, MQTT_V311, bytes.fromhex("32150001740007") + PAYLOAD_BYTES),
        (0, MQTT_V5, bytes.fromhex("3014000174" + "00") + PAYLOAD_BYTES),
        (0, MQTT_V311, bytes.fromhex("3013000174") + PAYLOAD_BYTES),
    ],
    ids=["qos1-v5", "qos1-v311", "qos0-v5", "qos0-v311"],
)
def test_publish_bytes(qos: int, protocol: int, expected: bytes) -> None:
    packet = encode_publish("t", 7, 123_456_789, 7, 3, qos=qos, protocol=protocol)
    assert packet == expected
    (frame,) = FrameSplitter().feed(packet)
    view = decode_publish(frame, protocol)
    assert (view.topic, view.qos, view.payload) == ("t", qos, PAYLOAD_BYTES)
    assert view.packet_id == (7 if qos else 0)
    assert PAYLOAD.unpack(view.payload) == (123_456_789, 7, 3)


def test_publish_template_long_topic_uses_two_byte_length() -> None:
    topic = "x" * 200
    packet = PublishTemplate(topic, qos=1).encode(65535, 1, 2, 3)
    assert packet[0] == PUBLISH << 4 | 0x02
    assert decode_varint(packet, 1) == (2 + 200 + 2 + 1 + 16, 3)
    (frame,) = FrameSplitter().feed(packet)
    assert decode_publish(frame).packet_id == 65535


def test_publish_template_refuses_qos3() -> None:
    with pytest.raises(ValueError, match="QoS 0, 1 or 2"):
        PublishTemplate("t", qos=3)


def test_puback_bytes() -> None:
    assert encode_puback(7) == b"\x40\x02\x00\x07"
    assert encode_puback(65535) == b"\x40\x02\xff\xff"


def test_splitter_byte_by_byte_and_in_one_piece_agree() -> None:
    stream = (
        encode_connect("abc")
        + encode_publish("a/b", 1, 5, 6, 7)
        + encode_puback(3)
        + PublishTemplate("y" * 300, qos=0).encode(0, 1, 2, 3)
    )
    whole = FrameSplitter().feed(stream)
    splitter = FrameSplitter()
    pieces: list[Frame] = []
    for index in range(len(stream)):
        pieces += splitter.feed(stream[index : index + 1])
    assert pieces == whole
    assert [f.packet_type for f in whole] == [1, 3, 4, 3]
    assert splitter.pending == 0


def test_splitter_keeps_incomplete_tail() -> None:
    packet = encode_puback(1)
    splitter = FrameSplitter()
    assert splitter.feed(packet + packet[:3]) == [Frame(0x40, b"\x00\x01")]
    assert splitter.pending == 3
    assert splitter.feed(packet[3:]) == [Frame(0x40, b"\x00\x01")]


def test_splitter_refuses_oversized_frame() -> None:
    with pytest.raises(MalformedPacketError, match="exceeds"):
        FrameSplitter(max_size=10).feed(b"\x30\x0b" + bytes(11))


def test_connack_v5_properties() -> None:
    # session present, success, Receive Maximum 10, Maximum Packet Size 1024,
    # Assigned Client Identifier "id", Reason String "ok" (skipped)
    props = b"\x21\x00\x0a" + b"\x27\x00\x00\x04\x00" + b"\x12\x00\x02id" + b"\x1f\x00\x02ok"
    body = b"\x01\x00" + encode_varint(len(props)) + props
    connack = decode_connack(Frame(CONNACK << 4, body))
    assert connack.session_present
    assert connack.reason_code == 0
    assert connack.receive_maximum == 10
    assert connack.maximum_packet_size == 1024
    assert connack.assigned_client_id == "id"


def test_connack_v311_refused() -> None:
    connack = decode_connack(Frame(CONNACK << 4, b"\x00\x05"), MQTT_V311)
    assert (connack.session_present, connack.reason_code) == (False, 5)


def test_connack_with_bad_property_is_malformed() -> None:
    with pytest.raises(MalformedPacketError):
        decode_connack(Frame(CONNACK << 4, b"\x00\x00\x02\x7e\x00"))


@pytest.mark.parametrize(
    ("protocol", "body", "codes"),
    [
        (MQTT_V5, b"\x00\x01\x00\x01\x80", [1, 0x80]),
        (MQTT_V311, b"\x00\x01\x01\x80", [1, 0x80]),
    ],
    ids=["v5", "v311"],
)
def test_suback(protocol: int, body: bytes, codes: list[int]) -> None:
    assert decode_suback(Frame(0x90, body), protocol) == (1, codes)
