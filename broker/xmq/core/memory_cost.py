"""What queued and retained messages really cost in memory (queue limits, budget, retained cap).

A QoS 1/2 message queued for a session is an entry in the session's ``DeliveryQueue`` naming
a ``Message`` that every session it was routed to shares: two machine words for a plain
delivery, a ``Delivery`` object for one of a shared-group subscription, with a durable
record, an ``on_done`` or several subscription identifiers (``core.delivery_queue``).
Counting only the payload (as the budget once did) saw 8 bytes where ~116 were used: a flood
of one-byte messages grew the process far past ``limits.memory_budget_bytes``. So:

* every queued delivery costs ``WORDS_DELIVERY_COST`` or ``DELIVERY_COST`` bytes
  (``delivery_queue.queued_cost``), plus ``record_cost`` of its durable record when it has
  one (a persistent session in a cluster), charged to its session and the budget;
* the first queued delivery of a message also charges the budget ``MESSAGE_COST`` plus twice
  its size (``len(topic) + len(payload)``): a message holds its topic and payload once as
  fields and once more in its encoded wire bytes (the publisher's bytes, or the first variant
  encoded for a subscriber). The last queued delivery of a message releases it.

The constants were measured with ``tracemalloc`` on the real objects (CPython 3.11, 64-bit):
a ``Delivery`` with its deque slot and marker words takes ~138 bytes; two words 16 (~23 at
most with the array's growth margin and up to a quarter of it consumed words not yet
dropped; a queue's smallest allocation, 32 bytes, and the ``DeliveryQueue`` itself are its
session's cost, as the deque's 760 bytes were); a
one-byte message routed from a plain PUBLISH (its ``Message``, payload and topic objects,
variant dict and wire tuple, and its entry in the queues' message table) ~530 bytes beyond
twice its topic and payload; the constants round them up.
``tests/unit/core/test_memory_cost.py`` measures them again and fails if the objects outgrow
them; ``tests/integration/broker/test_memory_budget.py`` checks that the RSS of a broker under
a queued flood stays within the budget plus a fixed baseline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from xmq.core.message import Message

DELIVERY_COST: Final = 152
"""Bytes of one delivery queued as a ``Delivery`` object: it, its deque slot and its two
marker words (measured ~138, rounded up)."""

WORDS_DELIVERY_COST: Final = 24
"""Bytes of one queued delivery held as two words: 16, at most ~23 with the array's growth
margin and a quarter of consumed words not yet dropped. A queue's fixed part (the object,
the rest of its smallest allocation) is its session's cost, as its deque's once was."""

RECORD_COST: Final = 56
"""Bytes of a queued delivery's durable record beyond its length (``record_cost``): the
``bytes`` object's header, rounded up (40), and its slot in its queue's list of records with
that list's growth margin and consumed slots not yet dropped (16). The records of one
forwarded message are one object shared by its deliveries (``RedisSessionStore.new_record``):
each is still charged its own, an upper bound."""


def record_cost(record: bytes) -> int:
    """What a queued delivery's durable ``record`` adds to its charge."""
    return RECORD_COST + len(record)


MESSAGE_COST: Final = 672
"""Bytes of one queued ``Message`` beyond twice its topic and payload (measured ~530; 640
until ``core.message`` was compiled: the compiled ``Message`` is 8 bytes larger, and
``tests/unit/core/test_memory_cost`` then measured 692 bytes against 690 charged for a
one-byte message with its queue words, 2026-12-02)."""


def hold(message: Message, entry_cost: int) -> int:
    """A delivery of ``message`` is queued (its entry costing ``entry_cost``): the bytes the
    broker-wide budget grows by."""
    refs = getattr(message, "queued_refs", 0)
    message.queued_refs = refs + 1
    if refs:
        return entry_cost
    return entry_cost + MESSAGE_COST + 2 * message.size


def would_hold(message: Message, entry_cost: int) -> int:
    """The budget bytes ``hold`` would add, without holding."""
    if getattr(message, "queued_refs", 0):
        return entry_cost
    return entry_cost + MESSAGE_COST + 2 * message.size


def release(message: Message, entry_cost: int) -> int:
    """A queued delivery of ``message`` (its entry costing ``entry_cost``) left the queue:
    the bytes the budget shrinks by."""
    refs = getattr(message, "queued_refs", 0) - 1
    if refs > 0:
        message.queued_refs = refs
        return entry_cost
    message.queued_refs = 0
    return entry_cost + MESSAGE_COST + 2 * message.size


RETAINED_COST: Final = 768
"""Bytes of one retained message beyond its topic and payload: its ``Message``, its entry in
the retained index and the index's trie node for its last level (levels shared with other
topics are not counted; the topic level cap bounds them)."""


def retained_cost(message: Message) -> int:
    """What one retained message counts against ``limits.max_retained_bytes``."""
    return RETAINED_COST + message.size
