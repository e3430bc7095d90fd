"""The (client id, forward id) pairs of the latest forwarded records made on this node.

``RedisSessionStore.record`` checks them before recording a forwarded message for a session:
a message reaching one session here by two paths (the same forward id from two nodes during a
takeover, or a copy handed on into the queue that a claim read back: ``restored``) is
recorded once. Redis's ``session:seen`` markers catch the same duplicate later, but only
after a record was encoded and a write queued; and a claim's read-back copies have no marker
of this run.

Bounded by count (``limit`` pairs) and by age (``max_age_s``, the ``session:seen`` markers'
lifetime: a duplicate comes within it), the oldest forgotten first. Before, each pair was a
tuple in a set and a deque, kept until 65,536 newer ones came (~100 bytes a pair, ~6.5 MB
held for good after one burst). Here they are grouped by forward id: the first client id of
a forward id is the dict's value itself (point to point: ~40 bytes a pair), more are the keys
of a dict (a fan-out: ~20–35 bytes a pair from 100 sessions a message up; a set would cost
~105 at 20,000, as sets grow 4x; the client id strings are the sessions'). The bound counts
pairs; the oldest forward id goes with all its pairs. The age is checked on ``add``,
coarsely: the order is stamped at most once per ``STAMP_S``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from xmq.contract.session_scripts import FORWARDED_SEEN_TTL_MS

RECENT_FORWARDED = 65_536
"""Pairs remembered at most (``limit``)."""

MAX_AGE_S = FORWARDED_SEEN_TTL_MS / 1000
"""Pairs older than this are forgotten (``max_age_s``)."""

STAMP_S = 1.0
"""The order is stamped with the clock at most this often (an age is this coarse)."""


class ForwardedMarks:
    """A bounded memory of (client id, forward id) pairs, grouped by forward id."""

    __slots__ = (
        "_appended",
        "_by_id",
        "_clock",
        "_last_added",
        "_order",
        "_popped",
        "_stamps",
        "count",
        "limit",
        "max_age_s",
    )

    def __init__(
        self,
        clock: Callable[[], float],
        limit: int = RECENT_FORWARDED,
        max_age_s: float = MAX_AGE_S,
    ) -> None:
        self._clock = clock
        self.limit = limit
        self.max_age_s = max_age_s
        self.count = 0
        """Pairs held."""
        # forward id -> its client id, or (more than one) its client ids as a dict's keys:
        # a dict of 20,000 keys costs ~65 bytes a key, a set ~105 (sets grow 4x)
        self._by_id: dict[str, str | dict[str, None]] = {}
        self._order: deque[str] = deque()  # forward ids, oldest first
        self._appended = 0  # forward ids ever appended to ``_order``
        self._popped = 0  # ... and taken from it
        self._last_added = 0.0  # when the latest forward id was appended
        # (t, n): the first n forward ids appended were appended at t or before
        self._stamps: deque[tuple[float, int]] = deque()

    def __contains__(self, mark: tuple[str, str]) -> bool:
        client_id, forward_id = mark
        held = self._by_id.get(forward_id)
        if held is None:
            return False
        if isinstance(held, str):
            return held == client_id
        return client_id in held

    def add(self, mark: tuple[str, str]) -> bool:
        """Remember a pair; False when it was held already."""
        client_id, forward_id = mark
        by_id = self._by_id
        held = by_id.get(forward_id)
        if held is None:
            self._stamp()
            by_id[forward_id] = client_id
            self._order.append(forward_id)
            self._appended += 1
        elif isinstance(held, str):
            if held == client_id:
                return False
            by_id[forward_id] = {held: None, client_id: None}
        elif client_id in held:
            return False
        else:
            held[client_id] = None
        self.count += 1
        if self.count > self.limit:
            self._forget_oldest()
        return True

    def discard(self, mark: tuple[str, str]) -> None:
        """Forget a pair (its record was not written: the message may come again)."""
        client_id, forward_id = mark
        by_id = self._by_id
        held = by_id.get(forward_id)
        if held is None:
            return
        if isinstance(held, str):
            if held != client_id:
                return
            del by_id[forward_id]  # its id stays in ``_order`` until it comes round
        elif client_id in held:
            del held[client_id]
        else:
            return
        self.count -= 1

    def _stamp(self) -> None:
        """Forget the forward ids older than ``max_age_s``; stamp the order (coarsely)."""
        now = self._clock()
        last, self._last_added = self._last_added, now
        stamps = self._stamps
        if stamps and last - stamps[-1][0] < STAMP_S:
            return
        if self._appended:  # every one so far was appended at ``last`` or before
            stamps.append((last, self._appended))
        while stamps and stamps[0][0] <= now - self.max_age_s:
            until = stamps.popleft()[1]
            while self._popped < until:
                self._pop()

    def _forget_oldest(self) -> None:
        while self.count > self.limit and self._order:
            self._pop()

    def _pop(self) -> None:
        held = self._by_id.pop(self._order.popleft(), None)
        self._popped += 1
        if held is not None:
            self.count -= 1 if isinstance(held, str) else len(held)
