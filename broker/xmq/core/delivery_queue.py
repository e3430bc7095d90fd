"""Queued deliveries kept out of the cyclic garbage collector's sight.

A full collection walks every object the collector tracks (~0.25 µs each). One ``Delivery``
object per queued message made that 3.9 M objects with the default memory budget full of a
fan-out (one-byte messages to 2,000 offline sessions): 1.1 s of CPU every full collection.

So a session's ``DeliveryQueue`` holds a plain queued delivery (no shared-group subscription,
no ``on_done``, at most one subscription identifier) as two machine words in an ``array`` —
which the collector never traverses — and makes it a ``Delivery`` again when it leaves the
queue. The words hold the message's key (``Message.queued_key``, from a counter: never
reused); ``_QUEUED`` (one for the process) keeps each such message, counting the words that
name it. The collector then sees one entry per distinct queued message, not one object per
delivery; and a message that nothing but the table holds any more (it was routed, it is not
in flight, retained nor being fanned out) is kept as plain data (``Message.plain``: a tuple
of atoms, which the collector stops tracking), made a ``Message`` again when a queue gives it
out (``_settle_fresh``, ``_message``): one distinct message per queued delivery at the
default budget was 780,000 tracked objects, ~190 ms of every full collection.

A delivery with a durable record (a persistent session in a cluster) is held the same way,
its record (``bytes``: not tracked by the collector) in the queue's side list of records, in
order. The records of one forwarded message are one shared object
(``RedisSessionStore.new_record``), so a fan-out of it to 20,000 sessions on this node costs
three words per delivery, not a ``Delivery`` object, a deque and a record each (which grew a
node by ~470 bytes per delivery, far beyond what the budget counted). Any other delivery
waits as itself in a side ``deque``, marked by a zero word in its place.
"""

from __future__ import annotations

import itertools
import sys
from array import array
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final, cast

from mypy_extensions import mypyc_attr  # a runtime dependency (pyproject): a no-op when pure

from xmq.core.memory_cost import DELIVERY_COST, WORDS_DELIVERY_COST, record_cost
from xmq.core.message import Message
from xmq.protocol.outbound_qos import QUEUED, OutboundFlight

if TYPE_CHECKING:
    from xmq.core.session import Subscription

_NO_IDS: tuple[int, ...] = ()
_HELD: Final = 0
"""The first word of an entry that is a ``Delivery`` in the side deque."""
_RECORDED: Final = 8
"""Flag-word bit: the entry's record is the next one in the side list of records."""
_ID_SHIFT: Final = 4
"""The flag word: retain (bit 0), QoS (bits 1-2), ``_RECORDED``, then the subscription id."""
_COMPACT_FROM: Final = 16
"""Consumed words are dropped once they are this many and a quarter of the array (so a
queue keeps fewer than 8 sent entries' words beyond a quarter of its live ones); the
consumed slots of the list of records likewise."""

_QUEUED: dict[object, Message] = {}
"""A message's key (``Message.queued_key``) -> the message, for every message a queue holds
as words that is an object (``_PLAIN`` holds the others)."""
_PLAIN: dict[object, bytes] = {}
"""A message's key -> the message as plain bytes (``Message.plain``), once nothing but the
table held it. Only ``bytes`` in it: the dict is never tracked by the collector."""
_NAMED: dict[object, int] = {}
"""A message's key -> how many queued words name it (ints only: the collector skips it).

The tables are keyed by ``object``: a new message's key is one int object, shared by the
tables and ``Message.queued_key`` (compiled, an ``int`` key would be boxed again for each)."""
_KEYS = itertools.count(1)
"""Keys of the table (never ``_HELD``, never reused: a key outlives its message's object)."""
_FRESH: list[int] = []
"""Keys of messages first queued since the last look, shifted left 3, plus the looks so far
(``_settle_fresh``)."""
_PLAIN_FROM = 4096
"""Messages the table keeps as objects before it keeps more as plain bytes: a few queued for
a moment (an online client's window full) cost a full collection ~1 ms, and are sent before
plain bytes would pay for their packing (~2,000 instructions a message, there and back)."""
_LOOKS: Final = 4
_LOOKED_AGAIN: Final = 8


@mypyc_attr(free_list_len=1)
class Delivery(OutboundFlight):
    """A QoS 1/2 message owed to one session: queued or in flight (its QoS state, ``state``
    and ``packet_id``, changes only through ``OutboundFlight``'s transitions).

    Compiled, the last one freed is kept for the next one made (``free_list_len=1``, mypyc's
    per-class free list of one): a point-to-point message's delivery is freed at its PUBACK
    and the next message's is made from it, without the allocator's ``malloc`` and ``free``
    (its attributes are cleared when it is freed, so it holds nothing meanwhile)."""

    __slots__ = (
        "flight_order",
        "message",
        "on_done",
        "record",
        "retain",
        "share",
        "subscription_ids",
    )

    def __init__(
        self,
        message: Message,
        qos: int,
        retain: bool,
        subscription_ids: tuple[int, ...],
        share: Subscription | None,
    ) -> None:
        self.message = message
        self.qos = qos
        self.retain = retain
        self.subscription_ids = subscription_ids
        self.packet_id = 0  # OutboundFlight's start: no packet id, QUEUED (its __init__
        self.state = QUEUED  # inlined: one call less per delivery)
        self.share = share
        self.record: bytes | None = None  # durable record (persistent sessions in a cluster)
        self.on_done: Callable[[], None] | None = None  # told when acknowledged (cluster)
        self.flight_order = 0  # its place among its session's in flight (core.inflight_window)


def _as_words(delivery: Delivery) -> bool:
    """A queue holds ``delivery`` as words (and its record, if any, in its list)."""
    return (
        delivery.share is None and delivery.on_done is None and len(delivery.subscription_ids) < 2
    )


def queued_cost(delivery: Delivery) -> int:
    """Bytes one queued ``delivery`` takes beyond its message (``core.memory_cost``):
    ``WORDS_DELIVERY_COST`` when a queue holds it as words, else (held as itself, a tracked
    object) ``DELIVERY_COST``; plus its durable record's ``record_cost``, when it has one."""
    record = delivery.record
    cost = WORDS_DELIVERY_COST if _as_words(delivery) else DELIVERY_COST
    return cost if record is None else cost + record_cost(record)


class DeliveryQueue:
    """A session's FIFO of queued deliveries (see the module docstring)."""

    __slots__ = ("_head", "_held", "_record_head", "_records", "length", "words")

    def __init__(self) -> None:
        self.words = array("Q")
        """Two words per entry; empty exactly when nothing is queued (so the hot path tests
        ``queue.words``, a C-level truth test, rather than calling ``__bool__``)."""
        self.length = 0
        """How many deliveries are queued (``len()`` without a call into Python)."""
        self._head = 0
        self._held: deque[Delivery] | None = None
        self._records: list[bytes] | None = None
        self._record_head = 0

    def __len__(self) -> int:
        return self.length

    def __bool__(self) -> bool:
        return len(self.words) > self._head

    def append(self, delivery: Delivery) -> None:
        if _as_words(delivery):
            record = delivery.record
            if record is not None:
                records = self._records
                if records is None:
                    records = self._records = []
                records.append(record)
            self.append_words(
                delivery.message,
                delivery.qos,
                delivery.retain,
                delivery.subscription_ids,
                record is not None,
            )
            return
        held = self._held
        if held is None:
            held = self._held = deque()
        held.append(delivery)
        words = self.words
        words.append(_HELD)
        words.append(0)
        self.length += 1

    def append_words(
        self,
        message: Message,
        qos: int,
        retain: bool,
        subscription_ids: tuple[int, ...],
        recorded: bool = False,
    ) -> None:
        """Queue a delivery with no share nor ``on_done`` and at most one subscription
        identifier (``queued_cost``: words) without making it a ``Delivery``
        (``recorded``: ``append`` put its record in the list of records)."""
        key: object = getattr(message, "queued_key", 0)
        if key and _QUEUED.get(key) is message:
            _NAMED[key] += 1
        else:
            if _FRESH:
                _settle_fresh()
            number = next(_KEYS)
            key = cast(object, number)  # boxed once: one int object for the tables and message
            message.queued_key = key
            _QUEUED[key] = message
            _NAMED[key] = 1
            if len(_QUEUED) > _PLAIN_FROM:
                _FRESH.append(number << 3)
        words = self.words
        words.append(cast(int, key))
        flags = qos << 1 | retain | (_RECORDED if recorded else 0)
        words.append(subscription_ids[0] << _ID_SHIFT | flags if subscription_ids else flags)
        self.length += 1

    def popleft(self) -> Delivery:
        words = self.words
        head = self._head
        if head >= len(words):
            raise IndexError("pop from an empty DeliveryQueue")
        key = words[head]
        flags = words[head + 1]
        head += 2
        if head == len(words):
            del words[:]
            head = 0
        elif head >= _COMPACT_FROM and head << 2 >= len(words):
            del words[:head]
            head = 0
        self._head = head
        self.length -= 1
        if key == _HELD:
            assert self._held is not None
            return self._held.popleft()
        message = _message(key)
        count = _NAMED[key]
        if count == 1:
            del _QUEUED[key], _NAMED[key]
        else:
            _NAMED[key] = count - 1
        ids = (flags >> _ID_SHIFT,) if flags >> _ID_SHIFT else _NO_IDS
        delivery = Delivery(message, flags >> 1 & 3, bool(flags & 1), ids, None)
        if flags & _RECORDED:
            delivery.record = self._pop_record()
        return delivery

    def _pop_record(self) -> bytes:
        records = self._records
        assert records is not None
        at = self._record_head
        record = records[at]
        at += 1
        if at == len(records):
            self._records = None
            at = 0
        elif at >= _COMPACT_FROM and at << 2 >= len(records):
            del records[:at]
            at = 0
        self._record_head = at
        return record

    def __iter__(self) -> Iterator[Delivery]:
        """The queued deliveries in order (those held as words as new ``Delivery`` objects)."""
        words = self.words
        held = iter(self._held or ())
        records = iter((self._records or [])[self._record_head :])
        for at in range(self._head, len(words), 2):
            key = words[at]
            if key == _HELD:
                yield next(held)
            else:
                flags = words[at + 1]
                ids = (flags >> _ID_SHIFT,) if flags >> _ID_SHIFT else _NO_IDS
                delivery = Delivery(_message(key), flags >> 1 & 3, bool(flags & 1), ids, None)
                if flags & _RECORDED:
                    delivery.record = next(records)
                yield delivery

    def __getitem__(self, index: int) -> Delivery:
        for at, delivery in enumerate(self):
            if at == index:
                return delivery
        raise IndexError(index)

    def held(self) -> Iterator[Delivery]:
        """The deliveries held as themselves (every one of a shared-group subscription)."""
        return iter(self._held or ())

    def clear(self) -> None:
        self._unname_all()
        del self.words[:]
        self.length = self._head = self._record_head = 0
        self._held = None
        self._records = None

    def __del__(self) -> None:
        # a queue dropped with entries (its session forgotten) must not keep their messages
        self._unname_all()

    def _unname_all(self) -> None:
        words = self.words
        for at in range(self._head, len(words), 2):
            key = words[at]
            if key != _HELD:
                _unname(key)


def _message(key: int) -> Message:
    """The message of a table entry; one held as plain data is a ``Message`` again (in the
    table, so that every word naming it gets the same object), counting the words naming it
    as its queued deliveries (``core.memory_cost``)."""
    entry = _QUEUED.get(key)
    if entry is not None:
        return entry
    message = Message.from_plain(_PLAIN.pop(key))
    message.queued_key = key
    message.queued_refs = _NAMED[key]
    _QUEUED[key] = message
    return message


def _settle_fresh() -> None:
    """Look at the messages first queued since the last look (they were routed): one that
    nothing but the table holds any more — no delivery in flight or held as itself, not
    retained, no fan-out still routing it — is kept as plain data, which the cyclic collector
    does not walk (a queued ``Message`` is a tracked object: ~0.15 µs of every full
    collection each). One still held elsewhere is looked at again with the next ones
    (``_LOOKS`` times at most, ``_LOOKED_AGAIN`` of them), then it stays an object."""
    kept: list[int] = []
    for item in _FRESH:
        key = item >> 3
        if _refs_in(_QUEUED, key) == _ONLY_THE_TABLE:
            entry = _QUEUED[key]
            plain = entry.plain() if entry.properties is None else None
            if plain is not None:
                del _QUEUED[key]
                _PLAIN[key] = plain
            continue
        held = _QUEUED.get(key)
        if held is None or held.properties is not None:
            continue  # (gone, or not plain data)
        if item & 7 < _LOOKS and len(kept) < _LOOKED_AGAIN:
            kept.append(item + 1)
    _FRESH[:] = kept


def _refs_in(table: dict[object, Message], key: object) -> int:
    """``sys.getrefcount`` of ``table[key]`` as this code sees it. Compiled and interpreted
    code hold references differently, so ``_ONLY_THE_TABLE`` is measured by this same code,
    not written down; the caller holds no reference to the entry meanwhile."""
    entry = table.get(key)
    return sys.getrefcount(entry)


_ONLY_THE_TABLE: Final = _refs_in({1: Message("", b"", 0, False, None, None, 0.0)}, 1)
"""``_refs_in`` of a table entry that nothing else holds."""


class _NothingQueued(DeliveryQueue):
    """The shared empty queue of every session that has never queued a message.

    An empty ``DeliveryQueue`` costs 136 bytes and a ``set`` 216: most sessions (an idle
    device) never queue a message nor receive QoS 2, so they share these read-only empties and
    get their own on first use (``queue_for_append``, ``inbound_for_update``). Mutating a
    shared one is a bug and raises.
    """

    __slots__ = ()

    def append(self, delivery: Delivery) -> None:
        raise RuntimeError("a session's queue must be allocated first (queue_for_append)")

    def append_words(
        self,
        message: Message,
        qos: int,
        retain: bool,
        subscription_ids: tuple[int, ...],
        recorded: bool = False,
    ) -> None:
        raise RuntimeError("a session's queue must be allocated first (queue_for_append)")


NOTHING_QUEUED: DeliveryQueue = _NothingQueued()


def _unname(key: int) -> None:
    count = _NAMED[key]
    if count == 1:
        del _NAMED[key]
        if _QUEUED.pop(key, None) is None:
            del _PLAIN[key]
    else:
        _NAMED[key] = count - 1


def messages_held_as_words() -> int:
    """Distinct messages queues hold as words (for tests and benchmarks)."""
    return len(_QUEUED) + len(_PLAIN)
