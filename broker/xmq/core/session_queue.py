"""A session's queued deliveries and the bytes they hold against its limits and the node's budget.

``SessionQueue`` is the base class of ``core.session.Session`` (compiled with it: the calls
between them are C calls through the native class's vtable). It owns the session's
``DeliveryQueue`` (shared empty one until the first delivery is queued), the bytes queued, and
the checks a delivery passes before it is queued: the session's ``max_messages`` and
``max_session_bytes``, the broker-wide memory budget (``core.memory_cost``). Sending, the
in-flight window and the acknowledgements are ``Session``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xmq.core.delivery_queue import NOTHING_QUEUED, Delivery, DeliveryQueue, queued_cost
from xmq.core.memory_cost import MESSAGE_COST, WORDS_DELIVERY_COST, hold, release, would_hold
from xmq.core.message import Message

if TYPE_CHECKING:
    from xmq.core.stats import BrokerStats


class QueueLimits:
    """Per-session and broker-wide bounds on queued messages."""

    __slots__ = ("budget_bytes", "max_inflight", "max_messages", "max_session_bytes")

    def __init__(
        self, max_messages: int, max_session_bytes: int, budget_bytes: int, max_inflight: int
    ) -> None:
        self.max_messages = max_messages
        self.max_session_bytes = max_session_bytes
        self.budget_bytes = budget_bytes
        self.max_inflight = max_inflight


class SessionQueue:
    """A session's queued outbound deliveries and their accounting (``Session``'s base)."""

    __slots__ = ("limits", "queue", "queued_bytes", "stats")

    def __init__(self, limits: QueueLimits, stats: BrokerStats) -> None:
        self.queue: DeliveryQueue = NOTHING_QUEUED  # allocated on first use
        self.queued_bytes = 0
        self.limits = limits
        self.stats = stats

    def _room_for(self, message: Message, cost: int) -> bool:
        """Room for an entry costing ``cost`` in this session's queue and in the node's
        budget (else the drop is counted)."""
        limits = self.limits
        stats = self.stats
        size = message.size
        if (
            self.queue.length >= limits.max_messages
            or self.queued_bytes + cost + size > limits.max_session_bytes
        ):
            stats.drop_for_quota("queue_full")
            return False
        # the exact budget cost only near the budget (``would_hold`` is the slower one): a
        # message already queued elsewhere costs less than this upper bound
        if stats.queued_bytes + cost + MESSAGE_COST + 2 * size > limits.budget_bytes and (
            stats.queued_bytes + would_hold(message, cost) > limits.budget_bytes
        ):
            stats.drop_for_quota("memory_budget")
            return False
        return True

    def _enqueue(self, delivery: Delivery) -> bool:
        if not self._room_for(delivery.message, queued_cost(delivery)):
            return False
        self.queue_restored(delivery)
        return True

    def _enqueue_words(
        self, message: Message, qos: int, retain: bool, subscription_ids: tuple[int, ...]
    ) -> bool:
        """``_enqueue`` of a delivery the queue holds as words, without making it one."""
        if not self._room_for(message, WORDS_DELIVERY_COST):
            return False
        queue = self.queue
        if queue is NOTHING_QUEUED:
            queue = self.queue = DeliveryQueue()
        queue.append_words(message, qos, retain, subscription_ids)
        self.queued_bytes += WORDS_DELIVERY_COST + message.size
        self.stats.queued_bytes += hold(message, WORDS_DELIVERY_COST)
        return True

    def queue_restored(self, delivery: Delivery) -> None:
        """Queue a delivery restored from storage (no limit: it was accepted before)."""
        self.queue_for_append().append(delivery)
        message = delivery.message
        cost = queued_cost(delivery)
        self.queued_bytes += cost + message.size
        self.stats.queued_bytes += hold(message, cost)

    def unqueued(self, delivery: Delivery) -> None:
        """A delivery left the queue (sent, expired, moved or dropped): release its bytes
        (before anything of it changes: its cost depends on how the queue held it)."""
        message = delivery.message
        cost = queued_cost(delivery)
        self.queued_bytes -= cost + message.size
        self.stats.queued_bytes -= release(message, cost)

    def clear_queue(self) -> None:
        """Forget every queued delivery, releasing its bytes."""
        queue = self.queue
        for delivery in queue:
            self.unqueued(delivery)
        queue.clear()

    def queue_for_append(self) -> DeliveryQueue:
        """The session's own queue (allocated now if it still shares the empty one)."""
        queue = self.queue
        if queue is NOTHING_QUEUED:
            queue = self.queue = DeliveryQueue()
        return queue
