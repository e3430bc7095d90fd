"""The inbound QoS 2 message ids this node has routed to its local sessions lately.

A persistent publisher's QoS 2 PUBLISH is routed under a message id that is the same on every
node (``core.inbound_ids``: ``<incarnation>/q<packet id>.<generation>``). When the publisher
moves to another node with the exchange still open (its PUBREC lost with the connection), that
node routes the re-sent PUBLISH once more (``InboundMessageIds.route_again``): it cannot know
which records of the first routing were written. A persistent session that has the message
ignores the second copy (its ``session:seen`` marker in Redis). A session that is not recorded
— a clean subscriber, or a delivery made at QoS 0 — has no such marker: before, it was sent
the message twice (issue 12, "0 QoS 2 duplicates").

Each node therefore remembers the inbound message ids it has routed to its local sessions,
and routes a message whose id it has already routed only to what the store deduplicates (the
QoS 1/2 deliveries of persistent sessions). The copy that reached a node first is the one its
unrecorded sessions got; a node that never had the first copy (a link frame lost with its
node) routes the second to all of them.

Bounded by count (``limit`` ids) and by age (``max_age_s``: the lifetime of the
``session:seen`` markers, within which a re-send is recognised at all), oldest forgotten
first. Only messages carrying such an id are remembered (QoS 2 from persistent publishers with
``max_queued_writes: 0``); everything else passes without a lookup.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from xmq.contract.session_scripts import FORWARDED_SEEN_TTL_MS

REMEMBERED_IDS = 65_536
"""Message ids remembered at most (``limit``)."""

MAX_AGE_S = FORWARDED_SEEN_TTL_MS / 1000
"""Ids older than this are forgotten (``max_age_s``): a re-send later is a new message."""


def is_inbound_message_id(forward_id: str) -> bool:
    """True for an inbound QoS 2 message id (``<incarnation>/q<packet id>.<generation>``),
    False for a node's forward id (``<node>/<epoch>/f<n>``) or a record counter."""
    return forward_id.rpartition("/")[2][:1] == "q"


class RoutedInboundIds:
    """The inbound message ids routed here within ``max_age_s``, at most ``limit`` of them."""

    __slots__ = ("_clock", "_ids", "_order", "limit", "max_age_s", "repeats")

    def __init__(
        self,
        clock: Callable[[], float],
        limit: int = REMEMBERED_IDS,
        max_age_s: float = MAX_AGE_S,
    ) -> None:
        self._clock = clock
        self.limit = limit
        self.max_age_s = max_age_s
        self._ids: set[str] = set()
        self._order: deque[tuple[float, str]] = deque()  # (when routed, id), oldest first
        self.repeats = 0
        """Messages routed again here and kept from the sessions that had them."""

    def __len__(self) -> int:
        return len(self._ids)

    def first_time(self, message_id: str) -> bool:
        """Remember ``message_id``; False when it was routed here within ``max_age_s``."""
        now = self._clock()
        self._forget_old(now)
        ids = self._ids
        if message_id in ids:
            self.repeats += 1
            return False
        ids.add(message_id)
        order = self._order
        order.append((now, message_id))
        if len(order) > self.limit:
            ids.discard(order.popleft()[1])
        return True

    def _forget_old(self, now: float) -> None:
        order = self._order
        oldest = now - self.max_age_s
        while order and order[0][0] <= oldest:
            self._ids.discard(order.popleft()[1])
