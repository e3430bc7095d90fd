"""What queued and retained messages really cost in memory (queue limits, budget, retained cap).

A QoS 1/2 message queued for a session is one ``Delivery`` (plus its slot in the session's
``deque``) pointing at a ``Message`` that every session it was routed to shares. Counting only
the payload (as the budget once did) saw 8 bytes where ~116 were used: a flood of one-byte
messages grew the process far past ``limits.memory_budget_bytes``. So:

* every queued delivery costs ``DELIVERY_COST`` bytes, charged to its session and the budget;
* the first queued delivery of a message also charges the budget ``MESSAGE_COST`` plus twice
  its size (``len(topic) + len(payload)``): a message holds its topic and payload once as
  fields and once more in its encoded wire bytes (the publisher's bytes, or the first variant
  encoded for a subscriber). The last queued delivery of a message releases it.

The constants were measured with ``tracemalloc`` on the real objects (CPython 3.11, 64-bit):
a ``Delivery`` with its deque slot takes 112 bytes, and a one-byte message routed from a plain
PUBLISH (its ``Message``, payload and topic objects, variant dict and wire tuple) ~530 bytes
beyond twice its topic and payload; the constants round them up.
``tests/unit/core/test_memory_cost.py`` measures them again and fails if the objects outgrow
them; ``tests/integration/broker/test_memory_budget.py`` checks that the RSS of a broker under
a queued flood stays within the budget plus a fixed baseline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from xmq.core.message import Message

DELIVERY_COST: Final = 136
"""Bytes of one queued ``Delivery`` and its deque slot (measured 112, rounded up)."""

MESSAGE_COST: Final = 640
"""Bytes of one queued ``Message`` beyond twice its topic and payload (measured ~530)."""


def delivery_cost(message: Message) -> int:
    """What one session is charged for queueing ``message`` (its per-session limit)."""
    return DELIVERY_COST + message.size


def hold(message: Message) -> int:
    """A delivery of ``message`` is queued: the bytes the broker-wide budget grows by."""
    refs = getattr(message, "queued_refs", 0)
    message.queued_refs = refs + 1
    if refs:
        return DELIVERY_COST
    return DELIVERY_COST + MESSAGE_COST + 2 * message.size


def would_hold(message: Message) -> int:
    """The budget bytes ``hold`` would add, without holding."""
    if getattr(message, "queued_refs", 0):
        return DELIVERY_COST
    return DELIVERY_COST + MESSAGE_COST + 2 * message.size


def release(message: Message) -> int:
    """A queued delivery of ``message`` left the queue: the bytes the budget shrinks by."""
    refs = getattr(message, "queued_refs", 0) - 1
    if refs > 0:
        message.queued_refs = refs
        return DELIVERY_COST
    message.queued_refs = 0
    return DELIVERY_COST + MESSAGE_COST + 2 * message.size


RETAINED_COST: Final = 768
"""Bytes of one retained message beyond its topic and payload: its ``Message``, its entry in
the retained index and the index's trie node for its last level (levels shared with other
topics are not counted; the topic level cap bounds them)."""


def retained_cost(message: Message) -> int:
    """What one retained message counts against ``limits.max_retained_bytes``."""
    return RETAINED_COST + message.size
