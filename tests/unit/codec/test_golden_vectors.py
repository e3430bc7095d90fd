"""Golden vectors, both directions, and streaming: each vector fed whole, byte by byte, and
cut at every position (a prefix yields nothing and never raises; the rest completes it).

The byte strings are written by hand from the MQTT 3.1, 3.1.1 and 5.0 specifications.
"""

from __future__ import annotations

import pytest

from xmq.codec.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
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
from xmq.codec.properties import Properties
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode


def hx(*parts: str | bytes) -> bytes:
    """Concatenate hex strings (spaces allowed) and literal byte strings."""
    return b"".join(bytes.fromhex(p) if isinstance(p, str) else p for p in parts)


GOLDEN: list[tuple[str, int, bytes, Packet]] = [
    # --- CONNECT ---------------------------------------------------------------------------
    (
        "connect-v3.1-MQIsdp",
        3,
        hx("10 10 00 06", b"MQIsdp", "03 02 00 3c 00 02", b"c1"),
        Connect(protocol_name="MQIsdp", protocol_version=3, keep_alive=60, client_id="c1"),
    ),
    (
        "connect-v311-minimal",
        4,
        hx("10 0e 00 04", b"MQTT", "04 02 00 3c 00 02", b"c1"),
        Connect(protocol_version=4, keep_alive=60, client_id="c1"),
    ),
    (
        "connect-v311-will-user-password",
        4,
        hx(
            "10 1f 00 04", b"MQTT", "04 ee 00 0a 00 02", b"c1",
            "00 03", b"w/t", "00 03", b"bye", "00 01", b"u", "00 02", b"pw",
        ),
        Connect(
            protocol_version=4,
            keep_alive=10,
            client_id="c1",
            will=Will("w/t", b"bye", qos=1, retain=True),
            username="u",
            password=b"pw",
        ),
    ),
    (
        "connect-v311-persistent-session-empty-id",
        4,
        hx("10 0c 00 04", b"MQTT", "04 00 00 00 00 00"),
        Connect(protocol_version=4, clean_start=False, client_id=""),
    ),
    (
        "connect-v5-properties",
        5,
        hx(
            "10 1e 00 04", b"MQTT", "05 02 00 3c",
            "0f 11 00 00 00 78 21 00 14 26 00 01", b"k", "00 01", b"v",
            "00 02", b"c1",
        ),
        Connect(
            keep_alive=60,
            client_id="c1",
            properties=Properties(
                session_expiry_interval=120, receive_maximum=20, user_properties=[("k", "v")]
            ),
        ),
    ),
    (
        "connect-v5-will-properties",
        5,
        hx(
            "10 1e 00 04", b"MQTT", "05 06 00 3c 00 00 02", b"c1",
            "07 01 01 18 00 00 00 05", "00 01", b"t", "00 02", b"hi",
        ),
        Connect(
            keep_alive=60,
            client_id="c1",
            will=Will(
                "t", b"hi", properties=Properties(payload_format_indicator=1, will_delay_interval=5)
            ),
        ),
    ),
    (
        "connect-v5-password-without-username",
        5,
        hx("10 11 00 04", b"MQTT", "05 42 00 00 00 00 00 00 02", b"pw"),
        Connect(password=b"pw"),
    ),
    # --- CONNACK ---------------------------------------------------------------------------
    ("connack-v311-session-present", 4, hx("20 02 01 00"), Connack(session_present=True)),
    ("connack-v311-not-authorized", 4, hx("20 02 00 05"), Connack(reason_code=5)),
    ("connack-v5-minimal", 5, hx("20 03 00 00 00"), Connack()),
    ("connack-v5-not-authorized", 5, hx("20 03 00 87 00"), Connack(reason_code=0x87)),
    (
        "connack-v5-properties",
        5,
        hx("20 0e 00 00 0b 12 00 03", b"abc", "13 00 1e 24 01"),
        Connack(
            properties=Properties(
                assigned_client_identifier="abc", server_keep_alive=30, maximum_qos=1
            )
        ),
    ),
    # --- PUBLISH ---------------------------------------------------------------------------
    ("publish-v311-qos0", 4, hx("30 0a 00 03", b"a/b", b"hello"), Publish("a/b", b"hello")),
    (
        "publish-v311-qos1-retain-dup",
        4,
        hx("3b 0c 00 03", b"a/b", "00 07", b"hello"),
        Publish("a/b", b"hello", qos=1, retain=True, dup=True, packet_id=7),
    ),
    (
        "publish-v311-qos2",
        4,
        hx("34 0c 00 03", b"a/b", "ff fe", b"hello"),
        Publish("a/b", b"hello", qos=2, packet_id=0xFFFE),
    ),
    (
        "publish-v311-two-byte-remaining-length",
        4,
        hx("30 cb 01 00 01", b"t", b"x" * 200),
        Publish("t", b"x" * 200),
    ),
    ("publish-v311-empty-payload", 4, hx("31 03 00 01", b"t"), Publish("t", b"", retain=True)),
    (
        "publish-v5-qos0-no-properties",
        5,
        hx("30 08 00 03", b"a/b", "00", b"hi"),
        Publish("a/b", b"hi"),
    ),
    (
        "publish-v5-qos1-properties",
        5,
        hx(
            "32 20 00 03", b"a/b", "00 07",
            "16 01 01 02 00 00 00 3c 0b 07 0b 80 01 23 00 05 26 00 01", b"k", "00 01", b"v",
            b"hi",
        ),
        Publish(
            "a/b",
            b"hi",
            qos=1,
            packet_id=7,
            properties=Properties(
                payload_format_indicator=1,
                message_expiry_interval=60,
                subscription_identifiers=[7, 128],
                topic_alias=5,
                user_properties=[("k", "v")],
            ),
        ),
    ),
    (
        "publish-v5-topic-alias-only",
        5,
        hx("30 07 00 00 03 23 00 01", b"x"),
        Publish("", b"x", properties=Properties(topic_alias=1)),
    ),
    # --- acknowledgements ------------------------------------------------------------------
    ("puback-v311", 4, hx("40 02 00 07"), Puback(7)),
    ("pubrec-v311", 4, hx("50 02 00 08"), Pubrec(8)),
    ("pubrel-v311", 4, hx("62 02 00 09"), Pubrel(9)),
    ("pubcomp-v311", 4, hx("70 02 00 0a"), Pubcomp(10)),
    ("puback-v5-short", 5, hx("40 02 00 07"), Puback(7)),
    ("puback-v5-reason-only", 5, hx("40 03 00 07 10"), Puback(7, 0x10)),
    (
        "puback-v5-reason-string",
        5,
        hx("40 0b 00 07 80 07 1f 00 04", b"oops"),
        Puback(7, 0x80, Properties(reason_string="oops")),
    ),
    ("pubrel-v5-not-found", 5, hx("62 03 00 09 92"), Pubrel(9, 0x92)),
    ("pubcomp-v5-short", 5, hx("70 02 00 0a"), Pubcomp(10)),
    ("pubrec-v5-no-subscribers", 5, hx("50 03 00 08 10"), Pubrec(8, 0x10)),
    # --- SUBSCRIBE / SUBACK ----------------------------------------------------------------
    (
        "subscribe-v311-two-filters",
        4,
        hx("82 0c 00 0a 00 03", b"a/+", "01 00 01", b"#", "02"),
        Subscribe(10, [SubscriptionRequest("a/+", 1), SubscriptionRequest("#", 2)]),
    ),
    (
        "subscribe-v5-options-and-identifier",
        5,
        hx("82 0b 00 0b 02 0b 2a 00 03", b"a/b", "2d"),
        Subscribe(
            11,
            [
                SubscriptionRequest(
                    "a/b", 1, no_local=True, retain_as_published=True, retain_handling=2
                )
            ],
            Properties(subscription_identifiers=[42]),
        ),
    ),
    ("suback-v311", 4, hx("90 05 00 0a 00 01 80"), Suback(10, [0, 1, 0x80])),
    ("suback-v5", 5, hx("90 05 00 0b 00 02 8f"), Suback(11, [2, 0x8F])),
    # --- UNSUBSCRIBE / UNSUBACK ------------------------------------------------------------
    (
        "unsubscribe-v311",
        4,
        hx("a2 0a 00 0c 00 03", b"a/b", "00 01", b"#"),
        Unsubscribe(12, ["a/b", "#"]),
    ),
    (
        "unsubscribe-v5-user-property",
        5,
        hx("a2 0f 00 0c 07 26 00 01", b"k", "00 01", b"v", "00 03", b"a/b"),
        Unsubscribe(12, ["a/b"], Properties(user_properties=[("k", "v")])),
    ),
    ("unsuback-v311", 4, hx("b0 02 00 0c"), Unsuback(12, [])),
    ("unsuback-v5", 5, hx("b0 05 00 0c 00 00 11"), Unsuback(12, [0, 0x11])),
    # --- PING, DISCONNECT, AUTH ------------------------------------------------------------
    ("pingreq", 4, hx("c0 00"), Pingreq()),
    ("pingresp", 5, hx("d0 00"), Pingresp()),
    ("disconnect-v311", 4, hx("e0 00"), Disconnect()),
    ("disconnect-v5-normal", 5, hx("e0 00"), Disconnect()),
    ("disconnect-v5-with-will", 5, hx("e0 01 04"), Disconnect(4)),
    (
        "disconnect-v5-properties",
        5,
        hx("e0 0d 8e 0b 11 00 00 00 00 1c 00 03", b"srv"),
        Disconnect(0x8E, Properties(session_expiry_interval=0, server_reference="srv")),
    ),
    ("auth-v5-success-empty", 5, hx("f0 00"), Auth()),
    (
        "auth-v5-continue",
        5,
        hx("f0 0f 18 0d 15 00 05", b"SCRAM", "16 00 02", b"xy"),
        Auth(0x18, Properties(authentication_method="SCRAM", authentication_data=b"xy")),
    ),
]  # fmt: skip

GOLDEN_IDS = [vector[0] for vector in GOLDEN]


def _reader_for(version: int, packet: Packet) -> PacketReader:
    # A server reader learns the version from CONNECT; otherwise the caller sets it.
    return PacketReader(protocol_version=0 if isinstance(packet, Connect) else version)


@pytest.mark.parametrize(("name", "version", "data", "packet"), GOLDEN, ids=GOLDEN_IDS)
def test_encode_matches_golden_bytes(name: str, version: int, data: bytes, packet: Packet) -> None:
    assert encode(packet, version) == data


@pytest.mark.parametrize(("name", "version", "data", "packet"), GOLDEN, ids=GOLDEN_IDS)
def test_decode_whole(name: str, version: int, data: bytes, packet: Packet) -> None:
    reader = _reader_for(version, packet)
    assert reader.feed(data) == [packet]
    assert reader.buffered == 0
    if isinstance(packet, Connect):
        assert reader.protocol_version == packet.protocol_version


@pytest.mark.parametrize(("name", "version", "data", "packet"), GOLDEN, ids=GOLDEN_IDS)
def test_decode_byte_by_byte(name: str, version: int, data: bytes, packet: Packet) -> None:
    reader = _reader_for(version, packet)
    for index in range(len(data) - 1):
        assert reader.feed(data[index : index + 1]) == []
        assert reader.buffered == index + 1
    assert reader.feed(data[-1:]) == [packet]
    assert reader.buffered == 0


@pytest.mark.parametrize(("name", "version", "data", "packet"), GOLDEN, ids=GOLDEN_IDS)
def test_decode_every_truncated_prefix(
    name: str, version: int, data: bytes, packet: Packet
) -> None:
    for cut in range(1, len(data)):
        reader = _reader_for(version, packet)
        assert reader.feed(data[:cut]) == [], f"prefix of {cut} bytes"
        assert reader.feed(data[cut:]) == [packet], f"rest after {cut} bytes"


@pytest.mark.parametrize(("name", "version", "data", "packet"), GOLDEN, ids=GOLDEN_IDS)
def test_decode_from_memoryview_and_bytearray(
    name: str, version: int, data: bytes, packet: Packet
) -> None:
    assert _reader_for(version, packet).feed(memoryview(data)) == [packet]
    assert _reader_for(version, packet).feed(bytearray(data)) == [packet]


@pytest.mark.parametrize("version", [4, 5], ids=["v311", "v5"])
def test_all_vectors_of_a_version_in_one_stream(version: int) -> None:
    vectors = [(d, p) for _, v, d, p in GOLDEN if v == version and not isinstance(p, Connect)]
    stream = b"".join(d for d, _ in vectors)
    expected = [p for _, p in vectors]
    assert PacketReader(protocol_version=version).feed(stream) == expected
    for chunk_size in (3, 7, 64):
        reader = PacketReader(protocol_version=version)
        got: list[Packet] = []
        for start in range(0, len(stream), chunk_size):
            got += reader.feed(stream[start : start + chunk_size])
        assert got == expected, f"chunks of {chunk_size}"
        assert reader.buffered == 0
