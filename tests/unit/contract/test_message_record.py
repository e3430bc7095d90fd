"""Message records (Redis queues and node links) round-trip and refuse garbage."""

from __future__ import annotations

import struct

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from xmq.codec.properties import Properties
from xmq.contract.message_record import RecordError, decode_record, encode_record


def test_record_round_trip_with_properties() -> None:
    props = Properties()
    props.content_type = "text/plain"
    props.user_properties = [("k", "v")]
    raw = encode_record("n-0/3/17", "a/b", b"\x00payload", 2, True, props, "pub", 1, False, (5, 9))
    record = decode_record(raw)
    assert record.record_id == "n-0/3/17"
    assert (record.topic, record.payload) == ("a/b", b"\x00payload")
    assert (record.qos, record.retain) == (2, True)
    assert (record.delivery_qos, record.delivery_retain) == (1, False)
    assert record.origin == "pub"
    assert record.subscription_ids == (5, 9)
    assert record.properties is not None
    assert record.properties.content_type == "text/plain"
    assert record.properties.user_properties == [("k", "v")]


def test_record_without_properties_or_origin() -> None:
    record = decode_record(encode_record("", "t", b"", 0, False, None, None, 0, False))
    assert record.properties is None
    assert record.origin is None
    assert record.payload == b""


@pytest.mark.parametrize("cut", [1, 4, 8, 12], ids=lambda cut: f"cut-{cut}")
def test_truncated_record_is_refused(cut: int) -> None:
    raw = encode_record("id", "topic", b"x", 1, False, None, "o", 1, False, (1,))
    with pytest.raises(RecordError):
        decode_record(raw[:cut])


def test_unknown_format_is_refused() -> None:
    with pytest.raises(RecordError):
        decode_record(b"\x09\x00\x00\x00")


def _reference_record(
    record_id: str, topic: str, payload: bytes, qos: int, flags: int, origin: str
) -> bytes:
    """The layout of the module docstring, field by field with ``struct`` (no properties,
    no subscription ids)."""
    rid, org, top = record_id.encode(), origin.encode(), topic.encode()
    return (
        struct.pack(">BBBB", 1, flags, qos, len(rid))
        + rid
        + struct.pack(">H", len(org))
        + org
        + struct.pack(">H", len(top))
        + top
        + b"\x00\x00"
        + payload
    )


@given(
    st.text(max_size=80),
    st.text(min_size=1, max_size=400),
    st.binary(max_size=40),
    st.integers(0, 2),
    st.integers(0, 2),
    st.booleans(),
    st.booleans(),
    st.text(max_size=400),
)
def test_record_bytes_are_the_documented_layout(
    record_id: str,
    topic: str,
    payload: bytes,
    qos: int,
    delivery_qos: int,
    retain: bool,
    delivery_retain: bool,
    origin: str,
) -> None:
    assume(len(record_id.encode()) <= 255)
    flags = delivery_qos | (4 if delivery_retain else 0) | (8 if retain else 0)
    record = encode_record(
        record_id, topic, payload, qos, retain, None, origin, delivery_qos, delivery_retain
    )
    assert record == _reference_record(record_id, topic, payload, qos, flags, origin)
    # the id already UTF-8 (``RunIds.next_raw``): the same bytes
    assert record == encode_record(
        record_id.encode(), topic, payload, qos, retain, None, origin, delivery_qos, delivery_retain
    )


def test_a_client_s_records_share_its_origin_field_and_a_too_long_id_is_refused() -> None:
    for n in range(4096 + 3):  # past the ids kept: made again, alike
        origin = f"client-{n % (4096 + 1)}"
        record = encode_record("r/1/1", "t", b"p", 1, False, None, origin, 1, False)
        assert record == _reference_record("r/1/1", "t", b"p", 1, 1, origin)
    for _ in range(2):  # refused each time (never kept)
        with pytest.raises(RecordError):
            encode_record("r/1/1", "t", b"p", 1, False, None, "c" * 0x10000, 1, False)
