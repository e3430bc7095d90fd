"""Packet identifier allocation: never reuse an id while it is in flight."""

from __future__ import annotations

from collections.abc import Container


class PacketIdExhausted(Exception):  # noqa: N818 - a condition, not an error class hierarchy
    """All 65,535 packet identifiers are in flight."""


class PacketIdAllocator:
    """Hands out identifiers 1..65535 round-robin, skipping those still in use.

    ``next_id`` is the next candidate. A session's deliveries take their ids through
    ``core.inflight_window.InflightWindow.put_next``, which reads and advances it inline with
    its own test of a free id (the candidate's slot, not only the id, must be free: a second
    copy of ``allocate``'s round-robin walk, kept there for the hot path); ``allocate`` serves
    a caller whose in-use ids are a plain container.

    Round-robin (rather than lowest-free) keeps a just-acknowledged id from being reused at
    once, which makes late duplicates from a confused client harmless.
    """

    __slots__ = ("next_id",)

    def __init__(self, start: int = 1) -> None:
        self.next_id = start if 1 <= start <= 0xFFFF else 1

    def allocate(self, in_use: Container[int]) -> int:
        """Return an id not contained in ``in_use`` (the caller's in-flight map)."""
        candidate = self.next_id
        for _ in range(0xFFFF):
            following = candidate + 1 if candidate < 0xFFFF else 1
            if candidate not in in_use:
                self.next_id = following
                return candidate
            candidate = following
        raise PacketIdExhausted("no free packet identifier")
