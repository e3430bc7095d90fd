"""The codec's one Variable Byte Integer decoder and its three kinds of caller.

``read_varint`` decodes a remaining length for the streaming reader (an incomplete header
means "wait"), for the plain-PUBLISH fast path (anything unusual means "not mine") and a
property length or varint property inside a whole packet (running past the end is malformed).
"""

from __future__ import annotations

import pytest

from xmq.codec.errors import MalformedPacket
from xmq.codec.packets import Publish
from xmq.codec.plain_publish import PlainRead, read_plain
from xmq.codec.property_codec import decode_properties
from xmq.codec.reader import PacketReader
from xmq.codec.wire import read_varint
from xmq.codec.writer import encode, encode_varint

BOUNDARIES = [0, 1, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152, 268_435_455]


@pytest.mark.parametrize("value", BOUNDARIES)
def test_every_size_decodes_at_an_offset(value: int) -> None:
    data = b"\xaa\xbb" + encode_varint(value) + b"\xcc"
    assert read_varint(data, 2, len(data)) == (value, len(data) - 1)


@pytest.mark.parametrize("value", BOUNDARIES)
def test_every_strict_prefix_is_incomplete(value: int) -> None:
    data = b"\xaa" + encode_varint(value)
    for end in range(1, len(data)):
        assert read_varint(data, 1, end) == (0, 0)


@pytest.mark.parametrize(
    "data", [b"\x80\x00", b"\xff\x80\x00", b"\x81\x80\x80\x00"], ids=["2", "3", "4"]
)
def test_non_minimal_is_malformed(data: bytes) -> None:
    with pytest.raises(MalformedPacket, match="non-minimal"):
        read_varint(data, 0, len(data))


def test_a_fifth_byte_is_malformed_even_before_it_arrives() -> None:
    with pytest.raises(MalformedPacket, match="longer than 4 bytes"):
        read_varint(b"\xff\xff\xff\xff", 0, 4)


def test_reader_waits_for_a_split_long_header_then_decodes() -> None:
    packet = encode(Publish("t", b"x" * 300, qos=1, packet_id=9), 5)
    assert packet[1] & 0x80
    reader = PacketReader(protocol_version=5)
    assert reader.feed(packet[:2]) == []
    decoded = reader.feed(packet[2:])
    assert len(decoded) == 1
    assert isinstance(decoded[0], Publish) and decoded[0].payload == b"x" * 300


@pytest.mark.parametrize(
    "data",
    [b"\x32\x80\x00" + b"\x00" * 8, b"\x32\xff\xff\xff\xff\x01" + b"\x00" * 8],
    ids=["non-minimal", "five-bytes"],
)
def test_a_bad_long_length_is_left_to_the_reader_which_refuses_it(data: bytes) -> None:
    assert not read_plain(data, 5, 1 << 20, PlainRead())
    with pytest.raises(MalformedPacket):
        PacketReader(protocol_version=5).feed(data)


def test_plain_publish_reads_a_long_length() -> None:
    packet = encode(Publish("t/1", b"y" * 200, qos=1, packet_id=4), 5)
    fields = PlainRead()
    assert read_plain(packet, 5, 1 << 20, fields)
    assert (fields.topic, fields.qos, fields.packet_id, fields.payload) == ("t/1", 1, 4, b"y" * 200)


def test_a_property_length_running_past_the_packet_is_malformed() -> None:
    with pytest.raises(MalformedPacket, match="truncated property length"):
        decode_properties(b"\x80", 0, 1, 3)


def test_a_varint_property_running_past_the_list_is_malformed() -> None:
    # property list of 2 bytes: Subscription Identifier (0x0B) whose varint continues past it
    with pytest.raises(MalformedPacket, match="truncated property"):
        decode_properties(b"\x02\x0b\x81\x01", 0, 4, 3)
