from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xmq.codec.packets import Publish
from xmq.codec.plain_publish import (
    _TOPICS,
    TOPIC_KEPT_BYTES,
    TOPICS_KEPT,
    PlainRead,
    read_plain,
)
from xmq.codec.properties import Properties
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode, encode_publish_parts

LIMIT = 1 << 20

Fields = tuple[str, int, int, bytes, bytes, bytes]


def plain_publish(
    data: bytes, version: int, limit: int, into: PlainRead | None = None
) -> Fields | None:
    """``read_plain`` into ``into`` (a new ``PlainRead`` by default): its fields, or None."""
    if into is None:
        into = PlainRead()
    if not read_plain(data, version, limit, into):
        return None
    return (into.topic, into.qos, into.packet_id, into.payload, into.head, into.tail)


topics = st.text(
    alphabet=st.characters(codec="utf-8", blacklist_characters="\x00+#"),
    min_size=1,
    max_size=80,
)


@given(
    topic=topics,
    payload=st.binary(max_size=300),
    qos=st.sampled_from([0, 1]),
    packet_id=st.integers(min_value=1, max_value=0xFFFF),
    version=st.sampled_from([4, 5]),
    dup=st.booleans(),
)
def test_agrees_with_the_reader_and_the_encoder(
    topic: str, payload: bytes, qos: int, packet_id: int, version: int, dup: bool
) -> None:
    packet = Publish(
        topic, payload, qos=qos, packet_id=packet_id if qos else 0, dup=dup and qos > 0
    )
    data = encode(packet, version)
    plain = plain_publish(data, version, LIMIT)
    assert plain is not None
    decoded = PacketReader(protocol_version=version).feed(data)
    assert len(decoded) == 1
    full = decoded[0]
    assert isinstance(full, Publish)
    got_topic, got_qos, got_id, got_payload, head, tail = plain
    assert (got_topic, got_qos, got_id, got_payload) == (
        full.topic,
        full.qos,
        full.packet_id,
        full.payload,
    )
    # head and tail are what the broker would encode for a subscriber of the same version
    assert (head, tail) == encode_publish_parts(topic, payload, qos, False, None, version)


def _v5(topic: str = "a/b", qos: int = 1, **props: int) -> bytes:
    properties = Properties(**props) if props else None  # type: ignore[arg-type]
    return encode(
        Publish(topic, b"xy", qos=qos, packet_id=9 if qos else 0, properties=properties), 5
    )


@pytest.mark.parametrize(
    "data",
    [
        encode(Publish("a", b"x", qos=2, packet_id=3), 5),
        encode(Publish("a", b"x", qos=1, packet_id=3, retain=True), 5),
        _v5(message_expiry_interval=5),
        _v5(topic_alias=1),
        encode(Publish("", b"x", qos=1, packet_id=3), 4),
        b"\x32\x07\x00\x01a\x00\x00\x00x",  # packet id 0: malformed
        b"\x32\x08\x00\x01a\x00\x01\x00x",  # remaining length one too long
        b"\x32\x06\x00\x01a\x00\x01\x00x",  # remaining length one too short
        b"\x30\x05\x00\x03\xff\xfe\xfd",  # topic not UTF-8
        b"\x30\x05\x00\x03a\x00b",  # topic with U+0000
        _v5() + _v5(),  # two packets in one read
        b"\x32\x80\x00",  # truncated long remaining length
        b"\x3b\x07\x00\x01a\x00\x01\x00x",  # DUP + retain
    ],
    ids=[
        "qos2",
        "retain",
        "expiry-property",
        "topic-alias",
        "empty-topic",
        "packet-id-0",
        "length-too-long",
        "length-too-short",
        "topic-not-utf8",
        "topic-nul",
        "two-packets",
        "truncated-varint",
        "dup-retain",
    ],
)
def test_anything_else_is_left_to_the_reader(data: bytes) -> None:
    assert plain_publish(data, 5, LIMIT) is None


def test_every_truncated_prefix_is_left_to_the_reader() -> None:
    data = encode(Publish("sensors/7/temp", b"21.5", qos=1, packet_id=300), 5)
    for end in range(1, len(data)):
        assert plain_publish(data[:end], 5, LIMIT) is None


def test_a_packet_over_the_size_limit_is_left_to_the_reader() -> None:
    data = encode(Publish("t", b"x" * 200, qos=1, packet_id=1), 5)
    assert plain_publish(data, 5, len(data)) is not None
    assert plain_publish(data, 5, len(data) - 1) is None


def test_three_one_one_has_no_property_byte() -> None:
    data = encode(Publish("t", b"\x00payload", qos=1, packet_id=1), 4)
    plain = plain_publish(data, 4, LIMIT)
    assert plain is not None
    assert plain[3] == b"\x00payload"


def test_a_topic_read_again_is_the_str_decoded_the_first_time() -> None:
    """Kept decoded by its bytes: the second read of a topic gives the same ``str`` object
    (its hash cached for the routing), equal to what the reader decodes."""
    first = plain_publish(_v5("kept/é/1"), 5, LIMIT)
    second = plain_publish(_v5("kept/é/1", qos=0), 5, LIMIT)
    assert first is not None and second is not None
    assert first[0] == "kept/é/1" and second[0] is first[0]


@pytest.mark.parametrize(
    "data",
    [b"\x30\x05\x00\x03\xff\xfe\xfd", b"\x30\x05\x00\x03a\x00b"],
    ids=["topic-not-utf8", "topic-nul"],
)
def test_a_topic_refused_once_is_refused_again(data: bytes) -> None:
    """Names that fail (not UTF-8, U+0000) are not kept: the full decoder answers each time."""
    assert plain_publish(data, 5, LIMIT) is None
    assert plain_publish(data, 5, LIMIT) is None
    assert data[4:] not in _TOPICS


def test_the_kept_topics_are_bounded() -> None:
    """At ``TOPICS_KEPT`` names the table is emptied before the next one goes in."""
    for number in range(TOPICS_KEPT + 10):
        plain = plain_publish(_v5(f"many/{number}"), 5, LIMIT)
        assert plain is not None and plain[0] == f"many/{number}"
        assert len(_TOPICS) <= TOPICS_KEPT
    assert b"many/0" not in _TOPICS and b"many/%d" % (TOPICS_KEPT + 9) in _TOPICS


def test_a_long_topic_is_decoded_each_time_not_kept() -> None:
    """Names over ``TOPIC_KEPT_BYTES`` are not kept (the table's size stays bounded)."""
    longer = "l" * (TOPIC_KEPT_BYTES + 1)
    plain = plain_publish(_v5(longer), 5, LIMIT)
    assert plain is not None and plain[0] == longer
    assert longer.encode() not in _TOPICS
    longest = "k" * TOPIC_KEPT_BYTES
    assert plain_publish(_v5(longest), 5, LIMIT) is not None
    assert longest.encode() in _TOPICS


def test_a_connection_s_last_topic_is_taken_from_its_read_without_the_table() -> None:
    """A ``head`` equal to the last read's names the same topic: its ``str`` comes from the
    ``PlainRead`` (the same object, even with the table emptied meanwhile)."""
    into = PlainRead()
    first = plain_publish(_v5("memo/é/1"), 5, LIMIT, into)
    assert first is not None and into.topic == "memo/é/1"
    _TOPICS.clear()
    again = plain_publish(_v5("memo/é/1"), 5, LIMIT, into)
    assert again is not None and again[0] is first[0]
    assert b"memo/\xc3\xa9/1" not in _TOPICS  # found without the table
    dup = encode(Publish("memo/é/1", b"xy", qos=1, packet_id=9, dup=True), 5)
    resent = plain_publish(dup, 5, LIMIT, into)
    assert resent is not None and resent[0] is first[0] and resent[4] == first[4]


def test_another_topic_of_the_same_length_is_not_taken_for_the_last() -> None:
    into = PlainRead()
    assert plain_publish(_v5("memo/1"), 5, LIMIT, into) is not None
    other = plain_publish(_v5("memo/2"), 5, LIMIT, into)
    assert other is not None and other[0] == "memo/2" and into.topic == "memo/2"
    qos0 = plain_publish(_v5("memo/2", qos=0), 5, LIMIT, into)
    assert qos0 is not None and qos0[:3] == ("memo/2", 0, 0)


def test_a_read_left_to_the_reader_leaves_the_last_topic() -> None:
    into = PlainRead()
    assert plain_publish(_v5("memo/3"), 5, LIMIT, into) is not None
    head = into.head
    assert plain_publish(b"\x30\x05\x00\x03a\x00b", 5, LIMIT, into) is None
    assert plain_publish(_v5("memo/3", topic_alias=1), 5, LIMIT, into) is None
    assert into.head is head and into.topic == "memo/3"


@pytest.mark.parametrize("qos", [0, 1])
def test_three_one_one_s_payload_is_its_tail(qos: int) -> None:
    """3.1.1 has no property byte: the payload is the bytes after the packet id, one slice."""
    data = encode(Publish("t", b"payload", qos=qos, packet_id=qos), 4)
    plain = plain_publish(data, 4, LIMIT)
    assert plain is not None and plain[3] == b"payload" and plain[3] is plain[5]
