"""Queued deliveries kept out of the cyclic garbage collector's sight.

A full collection walks every object the collector tracks (~0.25 µs each). One ``Delivery``
object per queued message made that 3.9 M objects with the default memory budget full of a
fan-out (one-byte messages to 2,000 offline sessions): 1.1 s of CPU every full collection.

So a session's ``DeliveryQueue`` holds a plain queued delivery (no shared-group subscription,
no durable record, no ``on_done``, at most one subscription identifier) as two machine words
in an ``array`` — which the collector never traverses — and makes it a ``Delivery`` again
when it leaves the queue. The words hold the message's ``id()``; ``_QUEUED`` (one for the
process) keeps each such message alive, counting the words that name it, so the id stays
that message's for as long as a word names it. The collector then sees one entry per
distinct queued message, not one object per delivery. Any other delivery waits as itself in
a side ``deque``, marked by a zero word in its place.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final

from xmq.core.memory_cost import DELIVERY_COST, WORDS_DELIVERY_COST
from xmq.core.message import Message
from xmq.protocol.outbound_qos import QUEUED, OutboundFlight

if TYPE_CHECKING:
    from xmq.core.session import Subscription

_NO_IDS: tuple[int, ...] = ()
_HELD: Final = 0
"""The first word of an entry that is a ``Delivery`` in the side deque."""
_COMPACT_FROM: Final = 16
"""Consumed words are dropped once they are this many and a quarter of the array (so a
queue keeps fewer than 8 sent entries' words beyond a quarter of its live ones)."""

_QUEUED: dict[object, Message] = {}
"""``id(message)`` -> the message, for every message a queue holds as words."""
_NAMED: dict[object, int] = {}
"""``id(message)`` -> how many queued words name it (ints only: the collector skips it)."""


class Delivery(OutboundFlight):
    """A QoS 1/2 message owed to one session: queued or in flight (its QoS state, ``state``
    and ``packet_id``, changes only through ``OutboundFlight``'s transitions)."""

    __slots__ = (
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


def queued_cost(delivery: Delivery) -> int:
    """Bytes one queued ``delivery`` takes beyond its message (``core.memory_cost``):
    ``WORDS_DELIVERY_COST`` when a queue holds it as words, else (held as itself, a tracked
    object) ``DELIVERY_COST``."""
    if (
        delivery.share is None
        and delivery.record is None
        and delivery.on_done is None
        and len(delivery.subscription_ids) < 2
    ):
        return WORDS_DELIVERY_COST
    return DELIVERY_COST


class DeliveryQueue:
    """A session's FIFO of queued deliveries (see the module docstring)."""

    __slots__ = ("_head", "_held", "length", "words")

    def __init__(self) -> None:
        self.words = array("Q")
        """Two words per entry; empty exactly when nothing is queued (so the hot path tests
        ``queue.words``, a C-level truth test, rather than calling ``__bool__``)."""
        self.length = 0
        """How many deliveries are queued (``len()`` without a call into Python)."""
        self._head = 0
        self._held: deque[Delivery] | None = None

    def __len__(self) -> int:
        return self.length

    def __bool__(self) -> bool:
        return len(self.words) > self._head

    def append(self, delivery: Delivery) -> None:
        if queued_cost(delivery) == WORDS_DELIVERY_COST:  # held as words
            self.append_words(
                delivery.message, delivery.qos, delivery.retain, delivery.subscription_ids
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
        self, message: Message, qos: int, retain: bool, subscription_ids: tuple[int, ...]
    ) -> None:
        """Queue a delivery with no share, record nor ``on_done`` and at most one
        subscription identifier (``queued_cost``: words) without making it a ``Delivery``."""
        key: object = id(message)  # one int object keys both tables (compiled: boxed once)
        count = _NAMED.get(key)
        if count is None:
            _QUEUED[key] = message
            _NAMED[key] = 1
        else:
            _NAMED[key] = count + 1
        words = self.words
        words.append(id(message))
        flags = qos << 1 | retain
        words.append(subscription_ids[0] << 3 | flags if subscription_ids else flags)
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
        message = _QUEUED[key]
        count = _NAMED[key]
        if count == 1:
            del _QUEUED[key], _NAMED[key]
        else:
            _NAMED[key] = count - 1
        ids = (flags >> 3,) if flags >> 3 else _NO_IDS
        return Delivery(message, flags >> 1 & 3, bool(flags & 1), ids, None)

    def __iter__(self) -> Iterator[Delivery]:
        """The queued deliveries in order (those held as words as new ``Delivery`` objects)."""
        words = self.words
        held = iter(self._held or ())
        for at in range(self._head, len(words), 2):
            key = words[at]
            if key == _HELD:
                yield next(held)
            else:
                flags = words[at + 1]
                ids = (flags >> 3,) if flags >> 3 else _NO_IDS
                yield Delivery(_QUEUED[key], flags >> 1 & 3, bool(flags & 1), ids, None)

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
        self.length = self._head = 0
        self._held = None

    def __del__(self) -> None:
        # a queue dropped with entries (its session forgotten) must not keep their messages
        self._unname_all()

    def _unname_all(self) -> None:
        words = self.words
        for at in range(self._head, len(words), 2):
            key = words[at]
            if key != _HELD:
                _unname(key)


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
        self, message: Message, qos: int, retain: bool, subscription_ids: tuple[int, ...]
    ) -> None:
        raise RuntimeError("a session's queue must be allocated first (queue_for_append)")


NOTHING_QUEUED: DeliveryQueue = _NothingQueued()


def _unname(key: int) -> None:
    count = _NAMED[key]
    if count == 1:
        del _QUEUED[key], _NAMED[key]
    else:
        _NAMED[key] = count - 1


def messages_held_as_words() -> int:
    """Distinct messages queues hold as words (for tests and benchmarks)."""
    return len(_QUEUED)
