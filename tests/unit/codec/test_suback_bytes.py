"""``suback_bytes``: the SUBACK of a SUBSCRIBE, byte for byte what ``encode`` writes."""

from __future__ import annotations

import pytest

from xmq.codec.packets import Suback
from xmq.codec.writer import encode, suback_bytes


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize("count", [1, 2, 3, 100, 101, 120, 121, 130, 300])
@pytest.mark.parametrize("packet_id", [1, 0x1234, 0xFFFF])
def test_suback_bytes_is_the_encoded_suback(version: int, count: int, packet_id: int) -> None:
    codes = [(0, 1, 2, 0x80, 0x87, 0x97)[n % 6] for n in range(count)]
    assert suback_bytes(packet_id, codes, version) == encode(Suback(packet_id, codes), version)
