from __future__ import annotations

import pytest

from xmq.protocol.packet_ids import PacketIdAllocator, PacketIdExhausted


def test_allocates_round_robin_and_skips_ids_in_flight() -> None:
    allocator = PacketIdAllocator()
    in_flight: dict[int, object] = {}
    first = allocator.allocate(in_flight)
    in_flight[first] = object()
    second = allocator.allocate(in_flight)
    assert (first, second) == (1, 2)
    del in_flight[first]
    assert allocator.allocate(in_flight) == 3  # a released id is not reused at once


def test_wraps_after_65535_and_never_returns_zero() -> None:
    allocator = PacketIdAllocator(start=65535)
    assert allocator.allocate(set()) == 65535
    assert allocator.allocate(set()) == 1


def test_skips_a_long_run_of_busy_ids() -> None:
    allocator = PacketIdAllocator()
    busy = set(range(1, 60000))
    assert allocator.allocate(busy) == 60000


def test_exhausted_when_every_id_is_in_flight() -> None:
    with pytest.raises(PacketIdExhausted):
        PacketIdAllocator().allocate(set(range(1, 65536)))
