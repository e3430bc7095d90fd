"""PacketReader behaviour beyond single packets: buffering, limits, version switching."""

from __future__ import annotations

import pytest

from xmq.codec.errors import MalformedPacket, PacketTooLarge
from xmq.codec.packets import Connack, Connect, Disconnect, Pingreq, Puback, Publish
from xmq.codec.properties import Properties
from xmq.codec.reader import MAX_PACKET_SIZE, PacketReader, decode_packet
from xmq.codec.writer import encode


def test_default_limit_is_the_largest_mqtt_packet() -> None:
    assert PacketReader().max_packet_size == MAX_PACKET_SIZE == 268_435_460


def test_buffered_counts_waiting_bytes() -> None:
    data = encode(Publish("t", b"x" * 10, qos=1, packet_id=1), 4)
    reader = PacketReader(protocol_version=4)
    assert reader.feed(data[:5]) == []
    assert reader.buffered == 5
    assert reader.feed(data[5:] + data[:3]) == [Publish("t", b"x" * 10, qos=1, packet_id=1)]
    assert reader.buffered == 3


def test_remaining_length_split_across_feeds() -> None:
    packet = Publish("t", b"y" * 20_000)
    data = encode(packet, 4)
    assert data[1] & 0x80 and data[2] & 0x80  # three-byte remaining length
    reader = PacketReader(protocol_version=4)
    assert reader.feed(data[:2]) == []
    assert reader.feed(data[2:3]) == []
    assert reader.feed(data[3:]) == [packet]


def test_four_byte_remaining_length_in_chunks() -> None:
    packet = Publish("big", b"z" * 2_097_152, qos=1, packet_id=9)
    data = encode(packet, 5)
    assert [b & 0x80 for b in data[1:5]] == [0x80, 0x80, 0x80, 0]
    reader = PacketReader(protocol_version=5)
    got = []
    for start in range(0, len(data), 65_536):
        got += reader.feed(data[start : start + 65_536])
    assert got == [packet]
    assert reader.buffered == 0


def test_too_large_is_detected_before_the_body_arrives() -> None:
    reader = PacketReader(max_packet_size=1024, protocol_version=4)
    head = encode(Publish("t", b"x" * 2000), 4)[:3]
    with pytest.raises(PacketTooLarge):
        reader.feed(head)
    assert reader.buffered == 0


def test_too_large_after_good_packets_in_the_same_chunk() -> None:
    reader = PacketReader(max_packet_size=64, protocol_version=4)
    stream = encode(Pingreq(), 4) + encode(Publish("t", b"x" * 100), 4)
    with pytest.raises(PacketTooLarge):
        reader.feed(stream)


def test_connect_sets_the_version_for_the_rest_of_the_chunk() -> None:
    props = Properties(reason_string="bye")
    stream = encode(Connect(client_id="c"), 5) + encode(Disconnect(0x04, props), 5)
    reader = PacketReader()
    assert reader.protocol_version == 0
    assert reader.feed(stream) == [Connect(client_id="c"), Disconnect(0x04, props)]
    assert reader.protocol_version == 5


def test_unknown_version_reads_by_311_rules() -> None:
    with pytest.raises(MalformedPacket):
        PacketReader().feed(b"\x40\x03\x00\x01\x10")  # a v5-only PUBACK form
    assert PacketReader().feed(b"\x40\x02\x00\x01") == [Puback(1)]


def test_client_side_reader_decodes_server_packets() -> None:
    reader = PacketReader(protocol_version=5)
    connack = Connack(False, 0, Properties(topic_alias_maximum=10, retain_available=0))
    assert reader.feed(encode(connack, 5)) == [connack]


def test_error_drops_the_buffer() -> None:
    reader = PacketReader(protocol_version=4)
    assert reader.feed(b"\x30\x05\x00") == []
    with pytest.raises(MalformedPacket):
        reader.feed(b"\x01t\x00\x00\x00" + b"\x00\x00")
    assert reader.buffered == 0


def test_properties_in_any_order_and_repeated_user_properties() -> None:
    # topic alias after two user properties with the same key; subscription ids in order
    props = bytes.fromhex("26 00 01 6b 00 01 31 26 00 01 6b 00 01 32 0b 03 23 00 04 0b 01")
    body = b"\x00\x01t" + bytes((len(props),)) + props + b"data"
    packet = PacketReader(protocol_version=5).feed(bytes((0x30, len(body))) + body)[0]
    assert isinstance(packet, Publish)
    assert packet.properties == Properties(
        user_properties=[("k", "1"), ("k", "2")], topic_alias=4, subscription_identifiers=[3, 1]
    )


def test_decoded_fields_are_plain_bytes_and_str() -> None:
    data = encode(Publish("a/b", b"\x00\x01", qos=1, packet_id=3), 4)
    chunk = bytearray(data)
    packet = PacketReader(protocol_version=4).feed(chunk)[0]
    chunk[-1] = 0xFF  # the decoded packet must not alias the input buffer
    assert isinstance(packet, Publish)
    assert type(packet.payload) is bytes and packet.payload == b"\x00\x01"
    assert type(packet.topic) is str


@pytest.mark.parametrize(
    "body_type", [bytes, bytearray, memoryview], ids=["bytes", "bytearray", "memoryview"]
)
def test_decode_packet_pure_function(body_type: type) -> None:
    data = encode(Puback(7, 0x10, Properties(reason_string="r")), 5)
    packet = decode_packet(data[0], body_type(data[2:]), 5)
    assert packet == Puback(7, 0x10, Properties(reason_string="r"))


def test_protocol_version_can_be_set_by_the_caller() -> None:
    reader = PacketReader()
    reader.protocol_version = 5
    assert reader.feed(b"\xe0\x01\x8e") == [Disconnect(0x8E)]


def test_error_lists_the_packets_decoded_before_it() -> None:
    good = encode(Publish("t", b"1", qos=1, packet_id=1), 4) + encode(Pingreq(), 4)
    reader = PacketReader(protocol_version=4)
    with pytest.raises(MalformedPacket) as caught:
        reader.feed(good + b"\x30\x03\x00\x01\xff")  # PUBLISH whose topic is not UTF-8
    assert caught.value.decoded == [Publish("t", b"1", qos=1, packet_id=1), Pingreq()]
    with pytest.raises(MalformedPacket) as caught:
        PacketReader(protocol_version=4).feed(b"\x40\x02\x00\x00")
    assert caught.value.decoded == []


def _more(reader: PacketReader) -> bool:
    return reader.more  # (a call: mypy would narrow the property across the feeds)


def test_a_limit_keeps_the_rest_undecoded_until_asked() -> None:
    stream = b"".join(encode(Puback(n), 5) for n in range(1, 11))
    reader = PacketReader(protocol_version=5)
    assert reader.feed(stream, 3) == [Puback(1), Puback(2), Puback(3)]
    assert _more(reader) and reader.buffered == len(stream) * 7 // 10
    assert reader.feed(b"", 4) == [Puback(4), Puback(5), Puback(6), Puback(7)]
    assert reader.feed(b"") == [Puback(8), Puback(9), Puback(10)]
    assert not _more(reader) and reader.buffered == 0


def test_bytes_fed_while_a_rest_waits_come_after_it() -> None:
    stream = b"".join(encode(Puback(n), 5) for n in range(1, 6))
    reader = PacketReader(protocol_version=5)
    assert reader.feed(stream[:-1], 2) == [Puback(1), Puback(2)]
    assert reader.feed(stream[-1:] + stream[:2], 0) == []  # kept, not decoded
    assert _more(reader) and reader.buffered == len(stream) * 3 // 5 + 2
    assert reader.feed(b"", 1) == [Puback(3)]
    assert reader.feed(stream[2:4]) == [Puback(4), Puback(5), Puback(1)]
    assert not _more(reader) and reader.buffered == 0


def test_a_malformed_packet_after_the_limit_raises_when_reached() -> None:
    reader = PacketReader(protocol_version=4)
    stream = encode(Pingreq(), 4) * 3 + b"\x60\x02\x00\x01" + encode(Pingreq(), 4)
    assert reader.feed(stream, 2) == [Pingreq(), Pingreq()]
    with pytest.raises(MalformedPacket) as raised:
        reader.feed(b"", 5)
    assert raised.value.decoded == [Pingreq()]
    assert not _more(reader) and reader.buffered == 0
