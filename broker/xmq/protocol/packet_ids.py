"""Packet identifier allocation: never reuse an id while it is in flight."""

from __future__ import annotations

from typing import Final, TypeVar

_MAX_ID: Final = 0xFFFF

_Held = TypeVar("_Held")


class PacketIdExhausted(Exception):  # noqa: N818 - a condition, not an error class hierarchy
    """All 65,535 packet identifiers are in flight."""


class PacketIdAllocator:
    """Hands out identifiers 1..65535 round-robin, skipping those still in use.

    ``next_id`` is the next candidate; only ``take_free_slot`` moves it. A session's
    deliveries in flight sit in a list of slots indexed by ``packet id & mask``
    (``core.inflight_window.InflightWindow``): ``take_free_slot`` hands out the next id whose
    *slot* is free, so an id in flight (its slot is held) is never handed out again, nor an id
    whose slot another id in flight holds.

    Round-robin (rather than lowest-free) keeps a just-acknowledged id from being reused at
    once, which makes late duplicates from a confused client harmless.
    """

    __slots__ = ("next_id",)

    def __init__(self, start: int = 1) -> None:
        self.next_id = start if 1 <= start <= _MAX_ID else 1

    def take_free_slot(self, slots: list[_Held | None], mask: int) -> int:
        """Return the next id (round robin from ``next_id``) whose slot ``slots[id & mask]`` is
        None, and move ``next_id`` past it; ``PacketIdExhausted`` if no id's slot is free.
        ``mask`` is ``len(slots) - 1`` (a power of two, at most 65,536 slots)."""
        candidate = self.next_id
        index = candidate & mask
        tries = _MAX_ID
        while slots[index] is not None:
            candidate = candidate + 1 if candidate < _MAX_ID else 1
            index = candidate & mask
            tries -= 1
            if not tries:
                raise PacketIdExhausted("no free packet identifier")
        self.next_id = candidate + 1 if candidate < _MAX_ID else 1
        return candidate
