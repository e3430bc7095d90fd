"""One PUBLISH's fan-out to thousands of sessions, routed a slice per event-loop turn.

A read is sliced between packets (``net.client_protocol``), but one PUBLISH matching 20,000
sessions was routed whole: tens of milliseconds of the loop for one packet. A delivery plan
longer than ``SLICE`` goes here instead (``Broker.publish``) and is routed ``SLICE``
deliveries per loop turn from the next turn on (``call_soon``), the plans of several messages
one after the other in the order they were published.

What waits for it:
- the publisher's acknowledgement: ``Fanout.routed(count, quota_dropped)`` is called after
  the last slice (``core.publish_flow`` writes the PUBACK / PUBREC then, or releases the held
  ack of a cluster with ``max_queued_writes`` 0 — the durable records of every slice hold it);
- the publisher's next packets: its connection counts the fan-outs it waits for
  (``ClientConnection.fanning_out``) and the network adapter reads nothing more meanwhile;
- a later message of the same publisher (its will, say): it is queued behind, so every
  session gets one publisher's messages in order.

A message another node forwards (``Broker.publish_from_peer``) is sliced the same way: the
node link counts its frame for the PUBLISH_ACK from ``routed`` (its quota outcome from
``quota_dropped``) and handles none of its later frames until then (``cluster.peer_link``).

A slice goes only while the durable store has fewer than ``RECORDS_AHEAD`` records not yet
written (a cluster's persistent sessions: a record each), else the turn waits
``RECORDS_WAIT_S`` for it: Redis writes records slower than slices make them, and each one
waiting holds its delivery, its write and its callback (~1.5 KB); 200,000 made at once (10
forwarded messages to 20,000 sessions) held 40,000 of them at a time, ~60 MB the process
kept (RSS) after they were written.

A session that ended or moved to another node before its slice is skipped (it is no longer
in ``Broker.sessions``). A subscription removed meanwhile still gets the message: it was
published before the UNSUBSCRIBE was handled.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from xmq.core.message import Message
from xmq.core.session import Session, Subscription

if TYPE_CHECKING:
    from asyncio import Handle

    from xmq.core.broker import Broker
    from xmq.core.cluster_ports import DurableContext

Plan = list[tuple[Session, Subscription, tuple[int, ...]]]
"""A topic's deliveries: one per session, with its (merged) subscription and identifiers."""
Matches = list[tuple[Session, Subscription]]
_NO_IDS: tuple[int, ...] = ()

SLICE: Final = 1024
"""Deliveries planned per loop turn for fan-outs in progress (1–3 ms of work)."""

RECORDS_AHEAD: Final = 4 * SLICE
"""Durable records not yet written (``DurableStore.unwritten``) beyond which no slice goes."""

RECORDS_WAIT_S: Final = 0.005
"""How long a turn that found the store that far behind waits before looking again."""

PLANNED_PER_DELIVERY: Final = 4
"""Subscriptions merged into a plan for the work of one delivery (~0.7 µs against ~3)."""

Routed = Callable[[int, bool], None]
"""Called once a sliced fan-out is over: the deliveries made (the message's other routes
included) and whether any delivery was dropped for a quota."""


def extend_plan(
    plan: Plan, index: dict[Session, int], matches: Matches, start: int, stop: int
) -> None:
    """Add ``matches[start:stop]`` to ``plan`` (``index``: each session's place in it):
    overlapping filters of one client make one delivery, at the highest QoS, with every
    subscription identifier."""
    for session, sub in matches if start == 0 and stop == len(matches) else matches[start:stop]:
        ids = (sub.identifier,) if sub.identifier else _NO_IDS
        at = index.get(session)
        if at is None:
            index[session] = len(plan)
            plan.append((session, sub, ids))
            continue
        _, first, first_ids = plan[at]
        merged = Subscription(
            session,
            first.topic_filter,
            max(first.qos, sub.qos),
            first.no_local and sub.no_local,
            first.retain_as_published or sub.retain_as_published,
        )
        plan[at] = (session, merged, first_ids + ids)


class Fanout:
    """One message's plan, built from ``matches`` first when it was not cached, then routed
    from ``at`` on."""

    __slots__ = (
        "at",
        "count",
        "context",
        "generation",
        "index",
        "matches",
        "message",
        "now",
        "plan",
        "planned",
        "quota_dropped",
        "recorded_only",
        "routed",
    )

    def __init__(
        self,
        message: Message,
        plan: Plan,
        now: float,
        context: DurableContext,
        matches: Matches | None,
        generation: int,
        recorded_only: bool = False,
    ) -> None:
        self.message = message
        self.plan = plan
        self.now = now
        self.context = context  # the publisher's held ack, for every slice's records
        self.matches = matches  # None once planned
        self.index: dict[Session, int] = {}
        self.planned = 0
        self.generation = generation  # the broker's subscription generation when matched
        self.routed: Routed | None = None
        """Set by the publisher's flow: called after the last slice."""
        self.at = 0
        self.count = 0
        self.quota_dropped = False
        # a message routed here before (core.routed_inbound_ids): only recorded deliveries
        self.recorded_only = recorded_only


class FanoutSlices:
    """The broker's fan-outs in progress, in the order their messages were published."""

    __slots__ = ("_broker", "_handle", "_queue", "waiting")

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._queue: deque[Fanout] = deque()
        self.waiting: dict[str | None, int] = {}
        """Publishers (``Message.origin``) with a fan-out in progress: how many (read only)."""
        self._handle: Handle | None = None

    def add(
        self,
        message: Message,
        plan: Plan,
        now: float,
        context: DurableContext,
        matches: Matches | None = None,
        recorded_only: bool = False,
    ) -> Fanout:
        """Queue ``plan`` (or the ``matches`` to build it from, a slice per turn too):
        routed from the next loop turn on (none of it now, so that a turn that finished one
        fan-out and read the publisher's next PUBLISH plans one slice)."""
        generation = self._broker.subscription_generation
        fanout = Fanout(message, plan, now, context, matches, generation, recorded_only)
        origin = message.origin
        self.waiting[origin] = self.waiting.get(origin, 0) + 1
        self._queue.append(fanout)
        if self._handle is None:
            self._handle = self._broker.loop.call_soon(self._turn)
        return fanout

    def _turn(self) -> None:
        """Route up to ``SLICE`` deliveries of the fan-outs in progress; finish those done."""
        self._handle = None
        queue = self._queue
        store = self._broker.store
        if store is not None and store.unwritten >= RECORDS_AHEAD:
            self._handle = self._broker.loop.call_later(RECORDS_WAIT_S, self._turn)
            return
        budget = SLICE
        while queue and budget > 0:
            fanout = queue[0]
            if fanout.matches is not None:
                budget -= self._plan(fanout, budget)
                continue
            if fanout.at < len(fanout.plan):
                budget -= self._route(fanout, budget)
            if fanout.at >= len(fanout.plan):
                queue.popleft()
                self._finish(fanout)
        if queue:
            self._handle = self._broker.loop.call_soon(self._turn)

    def _plan(self, fanout: Fanout, budget: int) -> int:
        """Merge the next subscriptions into the plan; return the work done, in deliveries.
        A plan finished with no subscription changed meanwhile is cached as ``_plan``'s."""
        matches = fanout.matches
        assert matches is not None
        start = fanout.planned
        stop = min(start + budget * PLANNED_PER_DELIVERY, len(matches))
        extend_plan(fanout.plan, fanout.index, matches, start, stop)
        fanout.planned = stop
        if stop == len(matches):
            fanout.matches = None
            fanout.index = {}
            broker = self._broker
            topic = fanout.message.topic
            plans = broker.plans
            if broker.subscription_generation == fanout.generation and topic not in plans.entries:
                plans.put(topic, fanout.plan)
        return -(-(stop - start) // PLANNED_PER_DELIVERY)

    def _route(self, fanout: Fanout, budget: int) -> int:
        """Deliver the next ``budget`` entries of the plan; return how many were planned."""
        broker = self._broker
        sessions = broker.sessions
        stats = broker.stats
        plan = fanout.plan
        start = fanout.at
        stop = min(start + budget, len(plan))
        message = fanout.message
        origin = message.origin
        mqos = message.qos
        retain = message.retain
        now = fanout.now
        count = 0
        quota_drops = stats.quota_drops
        context = fanout.context  # the records of this slice hold the publisher's ack
        recorded_only = fanout.recorded_only
        for session, sub, ids in plan[start:stop]:
            if sub.no_local and session.client_id == origin:
                continue
            if sessions.get(session.client_id) is not session:
                continue  # ended, or moved to another node, before its slice
            qos = sub.qos if sub.qos < mqos else mqos
            if recorded_only and (session.store is None or not qos):
                continue  # had the first copy: nothing would ignore this one
            as_retained = retain and sub.retain_as_published
            if session.deliver(message, qos, as_retained, ids, None, now, context):
                count += 1
        stats.deliveries_routed += stop - start
        fanout.at = stop
        fanout.count += count
        if stats.quota_drops != quota_drops:
            fanout.quota_dropped = True
        return stop - start

    def _finish(self, fanout: Fanout) -> None:
        origin = fanout.message.origin
        left = self.waiting[origin] - 1
        if left:
            self.waiting[origin] = left
        else:
            del self.waiting[origin]
        if fanout.routed is not None:
            fanout.routed(fanout.count, fanout.quota_dropped)
