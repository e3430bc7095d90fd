from __future__ import annotations

from collections.abc import Iterable

import pytest

from xmq.protocol.packet_ids import PacketIdAllocator, PacketIdExhausted

_EVERY_ID = 0x10000  # a slot for every id: an id's slot is held exactly when the id is


def _slots(held: Iterable[int] = (), size: int = _EVERY_ID) -> list[object | None]:
    slots: list[object | None] = [None] * size
    for packet_id in held:
        slots[packet_id & (size - 1)] = packet_id
    return slots


def test_allocates_round_robin_and_skips_ids_in_flight() -> None:
    allocator, slots = PacketIdAllocator(), _slots()
    first = allocator.take_free_slot(slots, _EVERY_ID - 1)
    slots[first] = "in flight"
    second = allocator.take_free_slot(slots, _EVERY_ID - 1)
    assert (first, second) == (1, 2)
    slots[first] = None
    assert allocator.take_free_slot(slots, _EVERY_ID - 1) == 3  # not reused at once


def test_wraps_after_65535_and_never_returns_zero() -> None:
    allocator, slots = PacketIdAllocator(start=65535), _slots()
    assert allocator.take_free_slot(slots, _EVERY_ID - 1) == 65535
    assert allocator.take_free_slot(slots, _EVERY_ID - 1) == 1
    assert allocator.next_id == 2


def test_skips_a_long_run_of_busy_ids() -> None:
    allocator = PacketIdAllocator()
    assert allocator.take_free_slot(_slots(range(1, 60000)), _EVERY_ID - 1) == 60000
    assert allocator.next_id == 60001


def test_skips_ids_whose_slot_another_id_holds() -> None:
    """Eight slots: id 9 shares id 1's slot, so while 1 is in flight 9 is not handed out."""
    allocator, slots = PacketIdAllocator(start=8), _slots([1, 2], size=8)
    assert allocator.take_free_slot(slots, 7) == 8
    assert allocator.take_free_slot(slots, 7) == 11  # 9 and 10: slots of 1 and 2


def test_exhausted_when_every_id_is_in_flight() -> None:
    allocator = PacketIdAllocator(start=77)
    with pytest.raises(PacketIdExhausted):
        allocator.take_free_slot(_slots(range(1, 65536)), _EVERY_ID - 1)
    assert allocator.next_id == 77  # nothing handed out: the allocator did not move
