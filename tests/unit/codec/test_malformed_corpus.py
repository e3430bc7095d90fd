"""A named corpus of malformed and protocol-violating packets: each must raise the expected
ProtocolError subclass with the expected MQTT 5 reason code, fed whole and byte by byte."""

from __future__ import annotations

import pytest

from xmq.codec.errors import (
    MalformedPacket,
    PacketTooLarge,
    ProtocolError,
    ProtocolViolation,
    UnsupportedProtocolVersion,
)
from xmq.codec.reader import PacketReader


def hx(*parts: str | bytes) -> bytes:
    """Concatenate hex strings (spaces allowed) and literal byte strings."""
    return b"".join(bytes.fromhex(p) if isinstance(p, str) else p for p in parts)


M, P, U = MalformedPacket, ProtocolViolation, UnsupportedProtocolVersion
MQTT4 = hx("00 04", b"MQTT", "04")
MQTT5 = hx("00 04", b"MQTT", "05")

# (id, reader protocol version, bytes, expected exception class, expected reason code)
CORPUS: list[tuple[str, int, bytes, type[ProtocolError], int]] = [
    # fixed header
    ("reserved-packet-type-0", 4, hx("00 00"), M, 0x81),
    ("remaining-length-5-bytes", 4, hx("30 ff ff ff ff 01"), M, 0x81),
    ("remaining-length-non-minimal", 4, hx("30 80 00"), M, 0x81),
    ("remaining-length-non-minimal-3-bytes", 4, hx("30 81 80 00", b"x"), M, 0x81),
    ("puback-flags-set", 4, hx("41 02 00 01"), M, 0x81),
    ("pubrel-flags-zero", 4, hx("60 02 00 01"), M, 0x81),
    ("subscribe-flags-zero", 4, hx("80 06 00 01 00 01", b"a", "00"), M, 0x81),
    ("unsubscribe-flags-zero", 4, hx("a0 05 00 01 00 01", b"a"), M, 0x81),
    ("pingreq-flags-set", 4, hx("c1 00"), M, 0x81),
    ("connect-flags-set", 0, hx("12 0c", MQTT4, "02 00 00 00 00"), M, 0x81),
    # CONNECT
    ("connect-reserved-flag", 0, hx("10 0c", MQTT4, "03 00 00 00 00"), M, 0x81),
    ("connect-unknown-level", 0, hx("10 0c 00 04", b"MQTT", "06 02 00 00 00 00"), U, 0x84),
    ("connect-unknown-name", 0, hx("10 0c 00 04", b"MQTX", "04 02 00 00 00 00"), U, 0x84),
    ("connect-mqisdp-level-4", 0, hx("10 0e 00 06", b"MQIsdp", "04 02 00 00 00 00"), U, 0x84),
    ("connect-mqtt-level-3", 0, hx("10 0c 00 04", b"MQTT", "03 02 00 00 00 00"), U, 0x84),
    ("connect-will-qos-without-flag", 0, hx("10 0c", MQTT4, "0a 00 00 00 00"), M, 0x81),
    ("connect-will-retain-without-flag", 0, hx("10 0c", MQTT4, "22 00 00 00 00"), M, 0x81),
    (
        "connect-will-qos-3",
        0,
        hx("10 11", MQTT4, "1e 00 00 00 00 00 01", b"t", "00 00"),
        M,
        0x81,
    ),
    ("connect-v311-password-no-user", 0, hx("10 0f", MQTT4, "42 00 00 00 00 00 01", b"p"), M, 0x81),
    ("connect-trailing-byte", 0, hx("10 0d", MQTT4, "02 00 00 00 00 ff"), M, 0x81),
    ("connect-truncated-client-id", 0, hx("10 0c", MQTT4, "02 00 00 00 05"), M, 0x81),
    ("connect-missing-will-payload", 0, hx("10 0f", MQTT4, "06 00 00 00 00 00 01", b"t"), M, 0x81),
    ("connect-client-id-invalid-utf8", 0, hx("10 0d", MQTT4, "02 00 00 00 01 ff"), M, 0x81),
    ("connect-client-id-nul", 0, hx("10 0e", MQTT4, "02 00 00 00 02 61 00"), M, 0x81),
    ("connect-client-id-surrogate", 0, hx("10 0f", MQTT4, "02 00 00 00 03 ed a0 80"), M, 0x81),
    ("connect-truncated-header", 0, hx("10 07", MQTT4), M, 0x81),
    ("connect-v5-missing-properties", 0, hx("10 0a", MQTT5, "02 00 00"), M, 0x81),
    (
        "connect-v5-duplicate-session-expiry",
        0,
        hx("10 17", MQTT5, "02 00 00 0a 11 00 00 00 01 11 00 00 00 02 00 00"),
        P,
        0x82,
    ),
    ("connect-v5-receive-maximum-0", 0, hx("10 10", MQTT5, "02 00 00 03 21 00 00 00 00"), P, 0x82),
    (
        "connect-v5-maximum-packet-size-0",
        0,
        hx("10 12", MQTT5, "02 00 00 05 27 00 00 00 00 00 00"),
        P,
        0x82,
    ),
    (
        "connect-v5-request-problem-information-2",
        0,
        hx("10 0f", MQTT5, "02 00 00 02 17 02 00 00"),
        P,
        0x82,
    ),
    (
        "connect-v5-topic-alias-not-allowed",
        0,
        hx("10 10", MQTT5, "02 00 00 03 23 00 01 00 00"),
        M,
        0x81,
    ),
    ("connect-v5-unknown-property", 0, hx("10 0f", MQTT5, "02 00 00 02 05 00 00 00"), M, 0x81),
    (
        "connect-v5-property-length-overrun",
        0,
        hx("10 0f", MQTT5, "02 00 00 09 11 00 00 00"),
        M,
        0x81,
    ),
    (
        "connect-v5-property-value-truncated",
        0,
        hx("10 10", MQTT5, "02 00 00 03 11 00 00 00 00"),
        M,
        0x81,
    ),
    (
        "connect-v5-auth-data-without-method",
        0,
        hx("10 12", MQTT5, "02 00 00 05 16 00 02 61 62 00 00"),
        P,
        0x82,
    ),
    (
        "connect-v5-will-session-expiry-not-allowed",
        0,
        hx("10 18", MQTT5, "06 00 00 00 00 00 05 11 00 00 00 01 00 01", b"t", "00 00"),
        M,
        0x81,
    ),
    (
        "connect-v5-user-property-truncated",
        0,
        hx("10 11", MQTT5, "02 00 00 04 26 00 01", b"k", "00 00"),
        M,
        0x81,
    ),
    # CONNACK
    ("connack-reserved-flags", 4, hx("20 02 02 00"), M, 0x81),
    ("connack-v5-invalid-reason", 5, hx("20 03 00 01 00"), M, 0x81),
    ("connack-v5-maximum-qos-2", 5, hx("20 05 00 00 02 24 02"), P, 0x82),
    ("connack-v311-trailing", 4, hx("20 03 00 00 00"), M, 0x81),
    ("connack-truncated", 4, hx("20 01 00"), M, 0x81),
    # PUBLISH
    ("publish-qos-3", 4, hx("36 06 00 01", b"t", "00 01", b"x"), M, 0x81),
    ("publish-qos1-packet-id-0", 4, hx("32 06 00 01", b"t", "00 00", b"x"), M, 0x81),
    ("publish-qos0-dup", 4, hx("38 04 00 01", b"t", b"x"), M, 0x81),
    ("publish-topic-overrun", 4, hx("30 04 00 09", b"ab"), M, 0x81),
    ("publish-topic-length-truncated", 4, hx("30 01 00"), M, 0x81),
    ("publish-qos1-packet-id-truncated", 4, hx("32 04 00 01", b"t", "00"), M, 0x81),
    ("publish-topic-invalid-utf8", 4, hx("30 04 00 01 c3", b"x"), M, 0x81),
    ("publish-topic-nul", 4, hx("30 04 00 02", b"a\x00"), M, 0x81),
    ("publish-v5-missing-property-length", 5, hx("30 03 00 01", b"t"), M, 0x81),
    ("publish-v5-subscription-identifier-0", 5, hx("30 06 00 01", b"t", "02 0b 00"), P, 0x82),
    (
        "publish-v5-duplicate-topic-alias",
        5,
        hx("30 0a 00 01", b"t", "06 23 00 01 23 00 02"),
        P,
        0x82,
    ),
    ("publish-v5-payload-format-2", 5, hx("30 06 00 01", b"t", "02 01 02"), P, 0x82),
    ("publish-v5-reason-string-not-allowed", 5, hx("30 07 00 01", b"t", "03 1f 00 00"), M, 0x81),
    ("publish-v5-property-length-5-bytes", 5, hx("30 08 00 01", b"t", "ff ff ff ff 01"), M, 0x81),
    ("publish-v5-property-id-over-127", 5, hx("30 06 00 01", b"t", "02 80 01"), M, 0x81),
    (
        "publish-v5-subscription-id-varint-too-long",
        5,
        hx("30 0a 00 01", b"t", "06 0b ff ff ff ff 01"),
        M,
        0x81,
    ),
    # acknowledgements
    ("puback-packet-id-0", 4, hx("40 02 00 00"), M, 0x81),
    ("puback-truncated", 4, hx("40 01 00"), M, 0x81),
    ("puback-v311-extra-byte", 4, hx("40 03 00 01 00"), M, 0x81),
    ("puback-v5-invalid-reason", 5, hx("40 03 00 01 05"), M, 0x81),
    ("pubrel-v5-invalid-reason", 5, hx("62 03 00 01 10"), M, 0x81),
    ("pubcomp-v5-trailing-after-properties", 5, hx("70 05 00 01 00 00 ff"), M, 0x81),
    ("pubrec-v5-not-allowed-property", 5, hx("50 06 00 01 00 02 01 01"), M, 0x81),
    # SUBSCRIBE
    ("subscribe-v311-no-filters", 4, hx("82 02 00 01"), P, 0x82),
    ("subscribe-v5-no-filters", 5, hx("82 03 00 01 00"), P, 0x82),
    ("subscribe-packet-id-0", 4, hx("82 06 00 00 00 01", b"a", "00"), M, 0x81),
    ("subscribe-v311-qos-3", 4, hx("82 06 00 01 00 01", b"a", "03"), M, 0x81),
    ("subscribe-v311-reserved-bits", 4, hx("82 06 00 01 00 01", b"a", "04"), M, 0x81),
    ("subscribe-missing-options", 4, hx("82 05 00 01 00 01", b"a"), M, 0x81),
    ("subscribe-v5-reserved-bits", 5, hx("82 07 00 01 00 00 01", b"a", "40"), M, 0x81),
    ("subscribe-v5-retain-handling-3", 5, hx("82 07 00 01 00 00 01", b"a", "30"), P, 0x82),
    ("subscribe-v5-qos-3", 5, hx("82 07 00 01 00 00 01", b"a", "03"), P, 0x82),
    (
        "subscribe-v5-two-subscription-identifiers",
        5,
        hx("82 0b 00 01 04 0b 01 0b 02 00 01", b"a", "00"),
        P,
        0x82,
    ),
    ("subscribe-v5-filter-invalid-utf8", 5, hx("82 07 00 01 00 00 01 ff 00"), M, 0x81),
    # SUBACK / UNSUBSCRIBE / UNSUBACK
    ("suback-v311-invalid-code", 4, hx("90 03 00 01 03"), M, 0x81),
    ("suback-v5-invalid-code", 5, hx("90 04 00 01 00 03"), M, 0x81),
    ("suback-v311-no-codes", 4, hx("90 02 00 01"), P, 0x82),
    ("unsubscribe-v311-no-filters", 4, hx("a2 02 00 01"), P, 0x82),
    ("unsubscribe-v5-no-filters", 5, hx("a2 03 00 01 00"), P, 0x82),
    ("unsubscribe-truncated-filter", 4, hx("a2 05 00 01 00 05", b"a"), M, 0x81),
    ("unsuback-v311-extra", 4, hx("b0 03 00 01 00"), M, 0x81),
    ("unsuback-v5-invalid-code", 5, hx("b0 04 00 01 00 01"), M, 0x81),
    # PING, DISCONNECT, AUTH
    ("pingreq-with-body", 4, hx("c0 01 00"), M, 0x81),
    ("pingresp-with-body", 4, hx("d0 01 00"), M, 0x81),
    ("disconnect-v311-with-body", 4, hx("e0 01 00"), M, 0x81),
    ("disconnect-v5-invalid-reason", 5, hx("e0 01 05"), M, 0x81),
    ("disconnect-v5-not-allowed-property", 5, hx("e0 04 00 02 24 01"), M, 0x81),
    ("disconnect-v5-flags-set", 5, hx("e1 00"), M, 0x81),
    ("auth-in-v311", 4, hx("f0 00"), M, 0x81),
    ("auth-v5-invalid-reason", 5, hx("f0 01 01"), M, 0x81),
    ("auth-v5-duplicate-method", 5, hx("f0 0a 18 08 15 00 01", b"a", "15 00 01", b"b"), P, 0x82),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "version", "data", "error", "reason"), CORPUS, ids=[c[0] for c in CORPUS]
)
def test_malformed_fed_whole(
    name: str, version: int, data: bytes, error: type[ProtocolError], reason: int
) -> None:
    reader = PacketReader(protocol_version=version)
    with pytest.raises(ProtocolError) as caught:
        reader.feed(data)
    assert type(caught.value) is error
    assert caught.value.reason_code == reason
    assert reader.buffered == 0


@pytest.mark.parametrize(
    ("name", "version", "data", "error", "reason"), CORPUS, ids=[c[0] for c in CORPUS]
)
def test_malformed_fed_byte_by_byte(
    name: str, version: int, data: bytes, error: type[ProtocolError], reason: int
) -> None:
    reader = PacketReader(protocol_version=version)
    with pytest.raises(ProtocolError) as caught:
        for index in range(len(data)):
            reader.feed(data[index : index + 1])
    assert type(caught.value) is error
    assert caught.value.reason_code == reason


@pytest.mark.parametrize(
    ("name", "version", "data", "error", "reason"), CORPUS, ids=[c[0] for c in CORPUS]
)
def test_malformed_after_a_valid_packet(
    name: str, version: int, data: bytes, error: type[ProtocolError], reason: int
) -> None:
    """The error surfaces even when a good packet precedes it in the same chunk."""
    reader = PacketReader(protocol_version=version or 4)
    ping = b"\xc0\x00"
    # A CONNECT must come first: there the good packet follows instead.
    stream = data + ping if data[0] >> 4 == 1 else ping + data
    with pytest.raises(ProtocolError) as caught:
        reader.feed(stream)
    assert type(caught.value) is error
    assert caught.value.reason_code == reason


def test_packet_too_large_is_raised_from_the_fixed_header() -> None:
    reader = PacketReader(max_packet_size=100)
    # Header announces 16,384 body bytes; only 3 bytes have arrived.
    with pytest.raises(PacketTooLarge) as caught:
        reader.feed(hx("30 80 80 01"))
    assert caught.value.reason_code == 0x95


def test_packet_at_the_limit_is_accepted() -> None:
    data = hx("30 05 00 01", b"t", b"xy")
    assert len(PacketReader(max_packet_size=len(data)).feed(data)) == 1
    with pytest.raises(PacketTooLarge):
        PacketReader(max_packet_size=len(data) - 1).feed(data)


@pytest.mark.parametrize(
    ("data", "level", "name"),
    [
        (hx("10 0c 00 04", b"MQTT", "06 02 00 00 00 00"), 6, "MQTT"),
        (hx("10 0c 00 04", b"MQTX", "04 02 00 00 00 00"), 4, "MQTX"),
        (hx("10 0e 00 06", b"MQIsdp", "05 02 00 00 00 00"), 5, "MQIsdp"),
    ],
    ids=["mqtt-level-6", "unknown-name", "mqisdp-level-5"],
)
def test_unsupported_version_carries_level_and_name(data: bytes, level: int, name: str) -> None:
    with pytest.raises(UnsupportedProtocolVersion) as caught:
        PacketReader().feed(data)
    assert caught.value.protocol_version == level
    assert caught.value.protocol_name == name


@pytest.mark.parametrize(
    ("data", "level"),
    [
        (hx("10 0c", MQTT4, "03 00 00 00 00"), 4),
        (hx("10 0a", MQTT5, "02 00 00"), 5),
        (hx("10 10", MQTT5, "02 00 00 03 21 00 00 00 00"), 5),
    ],
    ids=["v311-reserved-flag", "v5-truncated-properties", "v5-receive-maximum-0"],
)
def test_connect_errors_carry_the_protocol_version(data: bytes, level: int) -> None:
    with pytest.raises(ProtocolError) as caught:
        PacketReader().feed(data)
    assert caught.value.protocol_version == level


def _announced_total(data: bytes) -> int:
    length, shift, index = 0, 0, 1
    while True:
        byte = data[index]
        length |= (byte & 0x7F) << shift
        index += 1
        if byte < 0x80:
            return index + length
        shift += 7


@pytest.mark.parametrize(
    ("name", "data"),
    [(c[0], c[2]) for c in CORPUS if not c[0].startswith("remaining-length")],
    ids=[c[0] for c in CORPUS if not c[0].startswith("remaining-length")],
)
def test_corpus_entry_is_one_complete_packet(name: str, data: bytes) -> None:
    """Guards the corpus itself: each entry's remaining length matches its bytes, so the error
    comes from the packet's content, not from the reader waiting for more data."""
    assert _announced_total(data) == len(data)
