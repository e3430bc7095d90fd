from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xmq.codec.packets import Puback
from xmq.codec.puback_batch import plain_puback_id, plain_puback_ids
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode


@given(st.lists(st.integers(min_value=1, max_value=0xFFFF), min_size=1, max_size=50))
def test_agrees_with_the_reader(ids: list[int]) -> None:
    data = b"".join(encode(Puback(packet_id), 5) for packet_id in ids)
    assert plain_puback_ids(data) == ids
    assert plain_puback_id(data) == (ids[0] if len(ids) == 1 else 0)
    decoded = PacketReader(protocol_version=5).feed(data)
    assert [p.packet_id for p in decoded if isinstance(p, Puback)] == ids


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x40\x02\x00",  # partial
        b"\x40\x03\x00\x01",  # reason code follows: not plain
        b"\x40\x02\x00\x01\x40\x03\x00\x01\x10",
        b"\x40\x02\x00\x01\xc0\x00\x00\x00",  # a PINGREQ after it
        b"\x50\x02\x00\x01",  # PUBREC
        b"\x40\x02\x00\x00",  # packet id 0: malformed
        b"\x40\x02\x00\x01\x40\x02\x00\x00",
    ],
    ids=[
        "empty",
        "partial",
        "with-reason",
        "mixed-lengths",
        "then-pingreq",
        "pubrec",
        "packet-id-0",
        "second-packet-id-0",
    ],
)
def test_anything_else_is_left_to_the_reader(data: bytes) -> None:
    assert plain_puback_ids(data) is None
    assert plain_puback_id(data) == 0
