"""Retained messages owed to a new subscription, sent a slice per event-loop turn.

A SUBSCRIBE to ``#`` against a large retained store used to match and deliver every message
in the read that carried it, holding the loop for seconds. A ``RetainedFeed`` (one per
connection, created on first need) keeps a lazy walk of the retained index per subscription
and delivers at most ``SLICE`` messages per turn (the first slice at once, after the SUBACK;
the rest from ``call_soon``). It waits rather than drops when the client cannot take more: a
QoS 0 slice waits for a writable connection, a QoS 1/2 slice for room in the session's queue.

Order is kept (subscriptions in SUBACK order, each in the walk's order) and no message is
delivered twice: the walk skips messages retained after the SUBSCRIBE (those reached the new
subscription through routing) and topics cleared meanwhile. A feed whose subscription was
removed or replaced, or whose connection went away, stops.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from xmq.core.message import Message

if TYPE_CHECKING:
    from asyncio import Handle, TimerHandle

    from xmq.core.connection import ClientConnection
    from xmq.core.session import Subscription

SLICE: Final = 256
"""Retained messages delivered per loop turn and connection (~0.5 ms of work)."""

WAIT_S: Final = 0.01
"""How long a feed waits for a client that cannot take more (full queue, unwritable)."""


@dataclass(slots=True)
class _Walk:
    """One subscription's lazy walk of the retained index."""

    sub: Subscription
    key: str
    matches: Iterator[tuple[str, Message]]
    ids: tuple[int, ...]


class RetainedFeed:
    """The retained messages one connection's subscriptions are still owed."""

    __slots__ = ("_handle", "_walks", "conn")

    def __init__(self, conn: ClientConnection) -> None:
        self.conn = conn
        self._walks: deque[_Walk] = deque()
        self._handle: Handle | TimerHandle | None = None

    def add(
        self,
        sub: Subscription,
        key: str,
        matches: Iterator[tuple[str, Message]],
        ids: tuple[int, ...],
    ) -> None:
        """Owe `sub` (held under `key` in the session) what `matches` yields."""
        self._walks.append(_Walk(sub, key, matches, ids))

    def pending(self) -> bool:
        return bool(self._walks)

    def start(self) -> None:
        """Deliver the first slice now; schedule the rest."""
        if self._handle is None:
            self._turn()

    def stop(self) -> None:
        """The connection went away: nothing more is owed through it."""
        self._walks.clear()
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _turn(self) -> None:
        self._handle = None
        conn = self.conn
        broker = conn.broker
        loop = broker.loop
        waiting = self._slice()
        if not self._walks:
            return
        if waiting:
            self._handle = loop.call_later(WAIT_S, self._turn)
        else:
            self._handle = loop.call_soon(self._turn)

    def _slice(self) -> bool:
        """Deliver up to ``SLICE`` messages; True when the client cannot take more now."""
        conn = self.conn
        session = conn.session
        walks = self._walks
        if session is None or session.connection is not conn:
            walks.clear()
            return False
        broker = conn.broker
        retained = broker.retained
        stats = broker.stats
        limits = session.limits
        now = broker.now()
        budget = SLICE
        client_id = session.client_id
        while walks and budget:
            walk = walks[0]
            sub = walk.sub
            if session.subscriptions.get(walk.key) is not sub:
                walks.popleft()  # unsubscribed or replaced meanwhile
                continue
            if sub.qos == 0:
                if not conn.accepts_qos0():
                    return True
            elif len(session.queue) >= limits.max_messages:
                return True
            found = next(walk.matches, None)
            if found is None:
                walks.popleft()
                continue
            budget -= 1
            topic, message = found
            if message.expired(now):
                retained.delete(topic)
                stats.messages_expired += 1
                continue
            if sub.no_local and message.origin == client_id:
                continue
            qos = message.qos if message.qos < sub.qos else sub.qos
            session.deliver(message, qos, True, walk.ids, None, now)
        return False
