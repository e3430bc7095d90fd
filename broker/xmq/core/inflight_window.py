"""A session's deliveries in flight, by packet id: a list of slots, not a dict.

Every QoS 1/2 delivery a session sends is put in flight under a packet id and taken out at its
acknowledgement. In a ``dict`` that was ~640 instructions a delivery (compiled): ``setdefault``
with its key boxed and, every few ids, a resize (the ids only ever grow, so the deleted entries
fill the table), ``get`` and ``del`` at the PUBACK (the key boxed again). Here a delivery sits in
the slot ``packet_id & mask`` of a list whose length is a power of two, and its own
``packet_id`` says which id holds the slot; putting it there, finding it and taking it out are
an index each.

No two deliveries in flight share a slot: ``put_next`` gives a new delivery the allocator's
next id (round robin, ``protocol.packet_ids``' ``take_free_slot``) whose slot is free,
skipping the ones whose slot is held — an id in flight among them, so an id is still never
reused while in flight —, and ``add`` of a delivery restored under an id whose slot is held
(another id with the same low bits) doubles the list until they part (at 65,536 slots every id
has its own). The list doubles too once it is more than half full (so ``put_next`` finds a
free slot within a step or two), and has no list of its own again after ``clear`` (nor before
its first delivery: an idle session's window shares one empty slot list, ``_NO_SLOTS``).

A ``dict`` kept the deliveries in the order they went in flight, and a resumed session re-sends
them in that order (MQTT-4.6.0-1): ``add`` stamps each delivery with the window's count of
additions (``Delivery.flight_order``), and ``values`` / ``items`` / iteration give them sorted by
it — also across a wrap of the packet ids and for ids restored from the store in any order, as
the ``dict`` did. Putting a delivery under an id it holds already keeps its place, as a
``dict``'s assignment to a key it has does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from mypy_extensions import i64

from xmq.core.delivery_queue import Delivery
from xmq.protocol.packet_ids import PacketIdAllocator

_FIRST_SLOTS: Final = 8
"""Slots a window takes when its first delivery goes in flight: a power of two."""
_ALL_SLOTS: Final = 0x10000
"""A slot for every packet id (1..65535): the most a window grows to."""
_MAX_ID: Final = 0xFFFF
_NO_SLOTS: Final[list[Delivery | None]] = [None]
"""The slots of a window nothing has gone in flight in yet (shared, never written: ``put_next``
and ``add`` grow a window to its own ``_FIRST_SLOTS`` first), so that an idle connection's
session holds no list of its own (the idle connection's memory target: docs/benchmarks.md)."""


def _flight_order(delivery: Delivery) -> int:
    return delivery.flight_order


class InflightWindow:
    """A session's deliveries in flight, by packet id (see the module docstring); read like the
    ``dict[int, Delivery]`` it replaces (``get``, ``[]``, ``in``, ``len``, ``values``, ``items``,
    iteration in flight order), changed with ``put_next``, ``add``, ``remove`` and ``clear``
    (``[]=`` and ``del`` as well)."""

    __slots__ = ("_added", "_limit", "_mask", "_slots", "count")

    def __init__(self) -> None:
        # ``i64`` (compiled: machine integers, no tagged-int checks nor reference counts on
        # each read, add and mask; plain ints when pure)
        self._slots: list[Delivery | None] = _NO_SLOTS
        self._mask: i64 = 0
        self._limit: i64 = 0  # the most in flight before the slots double (0: none yet)
        self.count: i64 = 0
        """How many deliveries are in flight (``len()`` without a call into Python)."""
        self._added: i64 = 0  # additions so far: the next one's ``flight_order``

    # -- reading ----------------------------------------------------------------------------

    def get(self, packet_id: int) -> Delivery | None:
        """The delivery in flight under ``packet_id``, or None."""
        delivery = self._slots[packet_id & self._mask]
        if delivery is not None and delivery.packet_id == packet_id:
            return delivery
        return None

    def __getitem__(self, packet_id: int) -> Delivery:
        delivery = self.get(packet_id)
        if delivery is None:
            raise KeyError(packet_id)
        return delivery

    def __contains__(self, packet_id: object) -> bool:
        return isinstance(packet_id, int) and self.get(packet_id) is not None

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count != 0

    def values(self) -> list[Delivery]:
        """The deliveries in flight, in the order they went in flight."""
        held = [delivery for delivery in self._slots if delivery is not None]
        held.sort(key=_flight_order)
        return held

    def items(self) -> list[tuple[int, Delivery]]:
        """``(packet id, delivery)`` of each delivery in flight, in the order they went in."""
        return [(delivery.packet_id, delivery) for delivery in self.values()]

    def __iter__(self) -> Iterator[int]:
        return iter([delivery.packet_id for delivery in self.values()])

    # -- changing ---------------------------------------------------------------------------

    def put_next(self, allocator: PacketIdAllocator, delivery: Delivery) -> int:
        """Put a new ``delivery`` in flight under the allocator's next packet id whose slot is
        free (the allocator moves past it) and return that id, never one in flight; the caller
        starts the delivery under it next (``OutboundFlight.start``: until then ``get`` does
        not find it)."""
        if self.count >= self._limit:  # (now: ``delivery`` has no packet id to move by yet)
            self._grow()
        slots = self._slots
        mask = self._mask
        candidate = allocator.take_free_slot(slots, mask)
        index = candidate & mask
        slots[index] = delivery
        added = self._added
        delivery.flight_order = added
        self._added = added + 1
        self.count += 1
        return candidate

    def add(self, delivery: Delivery) -> None:
        """Put ``delivery`` in flight under its packet id (restored; a new one: ``put_next``);
        one in flight under that id already is replaced, and ``delivery`` takes its place in
        the order."""
        packet_id = delivery.packet_id
        if not 1 <= packet_id <= _MAX_ID:
            raise ValueError(f"packet id {packet_id} out of range")
        if not self._limit:  # still the shared ``_NO_SLOTS``: slots of its own first
            self._grow()
        index = packet_id & self._mask
        held = self._slots[index]
        if held is not None:
            if held.packet_id == packet_id:
                delivery.flight_order = held.flight_order
                self._slots[index] = delivery
                return
            while held is not None:  # another id with the same low bits: more slots
                if len(self._slots) >= _ALL_SLOTS:  # (one not started yet: ``put_next``)
                    raise ValueError(f"packet id {packet_id}'s slot is taken")
                self._grow()
                index = packet_id & self._mask
                held = self._slots[index]
        delivery.flight_order = self._added
        self._added += 1
        self._slots[index] = delivery
        self.count += 1
        if self.count > self._limit:
            self._grow()

    def __setitem__(self, packet_id: int, delivery: Delivery) -> None:
        """``add``: ``packet_id`` must be the delivery's own (its ``start`` or ``restore``)."""
        if delivery.packet_id != packet_id:
            raise ValueError(f"delivery has packet id {delivery.packet_id}, not {packet_id}")
        self.add(delivery)

    def remove(self, packet_id: int) -> Delivery | None:
        """Take the delivery in flight under ``packet_id`` out (its id is free); None if none."""
        index = packet_id & self._mask
        delivery = self._slots[index]
        if delivery is None or delivery.packet_id != packet_id:
            return None
        self._slots[index] = None
        self.count -= 1
        return delivery

    def __delitem__(self, packet_id: int) -> None:
        if self.remove(packet_id) is None:
            raise KeyError(packet_id)

    def clear(self) -> None:
        """Nothing in flight (and no list of its own again)."""
        self._slots = _NO_SLOTS
        self._mask = 0
        self._limit = 0
        self.count = 0

    def _grow(self) -> None:
        """Twice the slots: the deliveries keep distinct slots (one more low bit each); at a
        slot for every id, no more (nor any need)."""
        size = max(len(self._slots) * 2, _FIRST_SLOTS)
        if size > _ALL_SLOTS:
            self._limit = _ALL_SLOTS
            return
        slots: list[Delivery | None] = [None] * size
        mask = size - 1
        for delivery in self._slots:
            if delivery is not None:
                slots[delivery.packet_id & mask] = delivery
        self._slots = slots
        self._mask = mask
        self._limit = size // 2 if size < _ALL_SLOTS else _ALL_SLOTS
