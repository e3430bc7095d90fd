"""``decode_fields`` (the link's record decoder) against the record format: any record round
trips, and on any bytes it agrees with the decoder records were read with before it."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from xmq.codec.errors import ProtocolError
from xmq.codec.properties import Properties
from xmq.codec.property_codec import decode_properties, encode_properties
from xmq.contract.message_record import (
    MessageRecord,
    RecordError,
    decode_fields,
    decode_record,
    encode_record,
)

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


def _reference_decode(buf: bytes) -> MessageRecord:
    """The record decoder as it was before ``decode_fields`` (kept here to compare with)."""
    end = len(buf)
    try:
        fmt, flags, qos, rid_len = struct.unpack_from(">BBBB", buf, 0)
        if fmt != 1:
            raise RecordError(f"unknown record format {fmt}")
        pos = 4
        record_id = bytes(buf[pos : pos + rid_len]).decode()
        pos += rid_len
        (org_len,) = _U16.unpack_from(buf, pos)
        pos += 2
        origin = bytes(buf[pos : pos + org_len]).decode()
        pos += org_len
        (top_len,) = _U16.unpack_from(buf, pos)
        pos += 2
        topic = bytes(buf[pos : pos + top_len]).decode()
        pos += top_len
        count = buf[pos]
        pos += 1
        ids = tuple(_U32.unpack_from(buf, pos + 4 * n)[0] for n in range(count))
        pos += 4 * count
        props, pos = decode_properties(buf, pos, end, 3)
    except (struct.error, IndexError, UnicodeDecodeError, ProtocolError) as error:
        raise RecordError(str(error)) from error
    if pos > end:
        raise RecordError("record runs past its end")
    return MessageRecord(
        record_id,
        topic,
        bytes(buf[pos:]),
        qos,
        bool(flags & 8),
        flags & 3,
        bool(flags & 4),
        origin or None,
        props,
        ids,
    )


def _props(content_type: str | None, user: list[tuple[str, str]]) -> Properties | None:
    if content_type is None and not user:
        return None
    props = Properties()
    props.content_type = content_type
    props.user_properties = user or None
    return props


mqtt_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"))

records = st.builds(
    encode_record,
    st.text(max_size=40),
    st.text(max_size=80),
    st.binary(max_size=300),
    st.integers(0, 2),
    st.booleans(),
    st.builds(
        _props,
        st.none() | mqtt_text,
        st.lists(st.tuples(mqtt_text, mqtt_text), max_size=3),
    ),
    st.none() | st.text(max_size=20),
    st.integers(0, 2),
    st.booleans(),
    st.lists(st.integers(1, 268_435_455), max_size=4).map(tuple),
)


@given(records)
def test_fields_round_trip_and_point_at_the_topic_and_properties(raw: bytes) -> None:
    record = decode_record(raw)
    assert record == _reference_decode(raw)
    record_id, topic, payload, qos, flags, origin, props, ids, topic_at, props_at = decode_fields(
        raw
    )
    assert (record_id, topic, payload, qos, origin or None, ids) == (
        record.record_id,
        record.topic,
        record.payload,
        record.qos,
        record.origin,
        record.subscription_ids,
    )
    assert (flags & 3, bool(flags & 4), bool(flags & 8)) == (
        record.delivery_qos,
        record.delivery_retain,
        record.retain,
    )
    topic_bytes = topic.encode()
    assert raw[topic_at : topic_at + 2 + len(topic_bytes)] == _U16.pack(len(topic_bytes)) + (
        topic_bytes
    )
    encoded_props = encode_properties(props, 3) if props is not None else b"\x00"
    assert raw[props_at:] == encoded_props + payload


@given(st.binary(max_size=60), records, st.integers(0, 400))
def test_any_bytes_are_decoded_or_refused_as_before(noise: bytes, raw: bytes, cut: int) -> None:
    for data in (noise, b"\x01" + noise, raw[:cut], raw[:cut] + noise):
        try:
            expected: MessageRecord | None = _reference_decode(data)
        except RecordError:
            expected = None
        try:
            got: MessageRecord | None = decode_record(data)
        except RecordError:
            got = None
        assert got == expected


def test_a_memoryview_is_decoded_like_bytes() -> None:
    raw = encode_record("n/1/f2", "a/b", b"xyz", 1, False, None, "o", 1, False)
    assert decode_record(memoryview(raw)) == decode_record(raw)


def _reference_encode(
    record_id: str,
    topic: str,
    payload: bytes,
    qos: int,
    retain: bool,
    origin: str | None,
    delivery_qos: int,
    delivery_retain: bool,
) -> bytes:
    """The record encoder as it was (``struct``) before the typed-int one, without properties
    and subscription ids (the parts it shares with the generic encoders)."""
    flags = delivery_qos | (4 if delivery_retain else 0) | (8 if retain else 0)
    rid, org, top = record_id.encode(), (origin or "").encode(), topic.encode()
    return b"".join(
        (
            struct.pack(">BBBB", 1, flags, qos, len(rid)),
            rid,
            _U16.pack(len(org)),
            org,
            _U16.pack(len(top)),
            top,
            b"\x00\x00",
            payload,
        )
    )


@given(
    st.text(max_size=60),  # (at most 240 bytes: an id fits its u8 length)
    st.text(max_size=300),
    st.binary(max_size=300),
    st.integers(0, 2),
    st.booleans(),
    st.none() | st.text(max_size=300),
    st.integers(0, 2),
    st.booleans(),
)
def test_records_are_encoded_byte_for_byte_as_before(
    record_id: str,
    topic: str,
    payload: bytes,
    qos: int,
    retain: bool,
    origin: str | None,
    delivery_qos: int,
    delivery_retain: bool,
) -> None:
    args = (record_id, topic, payload, qos, retain, origin, delivery_qos, delivery_retain)
    got = encode_record(
        record_id, topic, payload, qos, retain, None, origin, delivery_qos, delivery_retain
    )
    assert got == _reference_encode(*args)
