"""The broker: sessions, subscriptions, retained messages and routing on one node.

Connections (``ClientConnection``) call into the broker synchronously; the timers are two
deadline wheels (keep alive and connect timeouts; session expiry and delayed wills). Routing a
PUBLISH looks up a per-topic delivery plan (cached until the subscriptions change), then hands
the message to each session (a shared group's one member: ``core.shared_delivery``). Sessions
live and end by ``core.session_lifecycle``, within the caps of ``core.node_caps``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from xmq.codec.reason_codes import ReasonCode
from xmq.core import shared_claims, shared_handoff
from xmq.core.auth_ports import AuthEvents
from xmq.core.cluster_ports import (
    NO_DURABLE_CONTEXT,
    ClusterRouter,
    Direct,
    DurableContext,
    DurableHold,
    DurableStore,
    NodeIdentity,
    RetainedSync,
    SessionDirectory,
)
from xmq.core.deadline_wheel import DeadlineWheel
from xmq.core.fanout_slices import SLICE as FANOUT_SLICE
from xmq.core.fanout_slices import Fanout, FanoutSlices, Matches, Plan, extend_plan
from xmq.core.held_acks import AckGate
from xmq.core.lease_fence import LeaseFence
from xmq.core.memory_cost import retained_cost
from xmq.core.message import Message
from xmq.core.node_caps import set_expiry, set_store
from xmq.core.routed_inbound_ids import RoutedInboundIds, is_inbound_message_id
from xmq.core.session import Delivery, Session, Subscription
from xmq.core.session_lifecycle import cancel_timers, expiry_due, publish_will
from xmq.core.settings import CoreSettings
from xmq.core.shared_delivery import deliver_shared, offline_members, shared_elsewhere
from xmq.core.stats import BrokerStats
from xmq.core.subscription import deliver_planned
from xmq.core.turn_flush import TurnFlush
from xmq.protocol.connect_terms import ServerLimits
from xmq.routing.filter_trie import MatchCache
from xmq.routing.retained import RetainedStore
from xmq.routing.shared_tree import SharedSubscriptions
from xmq.routing.subscription_tree import SubscriptionTree

if TYPE_CHECKING:
    from xmq.core.connection import ClientConnection

log = logging.getLogger("xmq.broker")

_NO_IDS: tuple[int, ...] = ()


class Broker(AuthEvents):
    """One broker node's state and routing."""

    def __init__(self, settings: CoreSettings) -> None:
        self.settings = settings
        # its limits (``settings`` is frozen): a native read on the publish path, where
        # ``settings.limits`` was a generic lookup in an interpreted dataclass
        self.limits: ServerLimits = settings.limits
        self.stats = BrokerStats()
        self.sessions: dict[str, Session] = {}
        # Delivery plans are cached per topic here, so the tree itself needs no cache.
        self.subscriptions: SubscriptionTree[Session, Subscription] = SubscriptionTree(0)
        self.shared: SharedSubscriptions[Session, Subscription] = SharedSubscriptions()
        self.retained: RetainedStore[Message] = RetainedStore(retained_cost)
        self.connections: set[ClientConnection] = set()
        self.plans: MatchCache[Plan] = MatchCache()
        self.fanouts = FanoutSlices(self)  # large fan-outs, a slice per loop turn
        # the publishers with a fan-out in progress: the fan-outs' own dict (read here only;
        # ``FanoutSlices`` is interpreted: ``fanouts.waiting`` was a generic lookup a message)
        self.fanout_origins: dict[str | None, int] = self.fanouts.waiting
        # every client's and node link's output written once per loop turn, one callback
        self.turn_flush = TurnFlush()
        self.subscription_generation = 0  # bumped by every non-shared subscription change
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client_seq = 0
        # Reads, and the wheels' ticks, are held while this node cannot prove its lease
        # (never without a cluster).
        self.fence = LeaseFence()
        # keep alive, connect timeouts
        self.deadlines = DeadlineWheel(lambda: self.loop, fence=self.fence)
        # parked sessions' expiry and delayed wills: a wheel entry each, not a TimerHandle
        # (~700 bytes)
        self.expiries = DeadlineWheel(
            lambda: self.loop, due=lambda entry, now: expiry_due(self, entry, now), fence=self.fence
        )
        # Cluster ports (xmq.app wires them when Redis is configured; None on a single node).
        self.identity: NodeIdentity | None = None
        self.directory: SessionDirectory | None = None
        self.cluster: ClusterRouter | None = None
        self.store: DurableStore | None = None
        self.retained_sync: RetainedSync | None = None
        # Publishers' acks held until their records are written (max_queued_writes 0).
        self.acks: AckGate | None = None
        self.claiming: dict[str, int] = {}  # client ids with a cluster claim in progress
        self.persistent_sessions = 0  # sessions held with a session expiry (the cap's count)
        self.durable_sessions = 0  # sessions with a ``store`` (kept by ``node_caps.set_store``)
        # client ids handed over to another node while a claim of them was in flight here:
        # that claim's reply predates the takeover and must not be applied
        self.revoked_claims: set[str] = set()
        # inbound QoS 2 message ids routed here: a re-sent PUBLISH routed again reaches only
        # the sessions whose store deduplicates it (core.routed_inbound_ids)
        self.routed_inbound = RoutedInboundIds(self.now)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def now(self) -> float:
        loop = self._loop
        if loop is None:
            loop = self.loop
        return loop.time()

    def new_client_id(self) -> str:
        self._client_seq += 1
        return f"xmq-{self.settings.node_id}-{self._client_seq:x}"

    # -- sessions ---------------------------------------------------------------------------

    def hand_over(self, client_id: str, ends_session: bool = False) -> Session | None:
        """Another node takes this session over: close its client (0x8E), forget it here.

        Its stored copy (persistent sessions) stays in Redis for the new owner. With
        ``ends_session`` (the new connection starts clean) the session ends: a delayed will
        still pending is published, as ``session_lifecycle.end_session`` does (MQTT 5
        §3.1.3.2.2: the will goes when the delay has passed or the session ends, whichever is
        first); a session resumed elsewhere in time cancels it.
        """
        session = self.sessions.get(client_id)
        if session is None:
            return None
        if session.connection is not None:
            session.connection.take_over()
        session = self.sessions.get(client_id)
        if session is None:
            return None
        will = session.will if ends_session else None
        cancel_timers(self, session)
        durable = session.store is not None
        set_store(self, session, None)  # it moves, it does not unsubscribe: no durable deltas
        for flt, sub in list(session.subscriptions.items()):
            self.remove_subscription(session, flt, sub)
        shared_handoff.session_ended(self, session, moved=durable)
        session.clear_queue()
        session.inflight.clear()
        del self.sessions[client_id]
        set_expiry(self, session, 0)
        if self.cluster is not None:
            self.cluster.session_gone(session, durable)
        if will is not None:
            publish_will(self, will)
        return session

    # -- subscriptions ----------------------------------------------------------------------

    def subscribe(
        self, session: Session, sub: Subscription, hold: DurableHold | None = None
    ) -> bool:
        """Add or replace a subscription; True when it is new (for Retain Handling 1).
        ``hold`` (a SUBACK): held until the subscription's durable record is written."""
        key = (
            sub.topic_filter
            if sub.share_group is None
            else (f"$share/{sub.share_group}/{sub.topic_filter}")
        )
        previous = session.subscriptions.get(key)
        session.subscriptions[key] = sub
        if session.store is not None:
            session.store.subscribed(session, key, sub, hold)
        if self.cluster is not None:
            if previous is not None:
                self.cluster.subscription_changed(session, previous, False)
            self.cluster.subscription_changed(session, sub, True)
        if sub.share_group is None:
            self.subscriptions.add(sub.topic_filter, session, sub)
            self.plans.invalidate(sub.topic_filter)
            self.subscription_generation += 1  # plans being built over turns are stale
        else:
            self.shared.add(sub.share_group, sub.topic_filter, session, sub)
        return previous is None

    def unsubscribe(self, session: Session, key: str) -> bool:
        sub = session.subscriptions.pop(key, None)
        if sub is None:
            return False
        if session.store is not None:
            session.store.subscribed(session, key, None)
        self.remove_subscription(session, key, sub)
        return True

    def remove_subscription(self, session: Session, key: str, sub: Subscription) -> None:
        """Take a subscription out of the trees (``session.subscriptions`` is the caller's)."""
        if self.cluster is not None:
            self.cluster.subscription_changed(session, sub, False)
        if sub.share_group is None:
            self.subscriptions.remove(sub.topic_filter, session)
        else:
            self.shared.remove(sub.share_group, sub.topic_filter, session)
            return
        self.plans.invalidate(sub.topic_filter)
        self.subscription_generation += 1

    def subscription_count(self) -> int:
        return len(self.subscriptions) + len(self.shared)

    # -- routing ----------------------------------------------------------------------------

    def _plan(self, topic: str, matches: Matches) -> Plan:
        plan: Plan = []
        extend_plan(plan, {}, matches, 0, len(matches))
        self.plans.put(topic, plan)
        return plan

    def publish(
        self, message: Message, context: DurableContext = NO_DURABLE_CONTEXT
    ) -> int | Fanout:
        """Route a message to every matching subscription; return the number of deliveries,
        or the ``Fanout`` still in progress.

        ``context.hold`` (cluster only): the publisher's held acknowledgement. The local
        persistent sessions' records hold it (``Session.deliver`` -> ``DurableStore.record``),
        and so does the cluster router, for the durable records on other nodes.

        A plan of more than ``fanout_slices.SLICE`` local sessions (or a message whose
        publisher has one in progress) is routed a slice per loop turn: the ``Fanout`` is
        returned, and its ``routed`` (set by the caller) is called with the deliveries once
        the last slice is done.
        """
        local = self._route_local(message, context)
        count = 0
        cluster = self.cluster
        if cluster is not None:
            count += cluster.forward(message, context.hold)
            if message.retain and (sync := self.retained_sync) is not None:
                sync.changed(message, context.hold)
        if len(self.shared):
            now = self.now() if message.expires_at is not None else 0.0
            for group in self.shared.match(message.topic):
                if (
                    cluster is not None and shared_elsewhere(cluster, group, message, context.hold)
                ) or deliver_shared(self, group, message, now, (), context):
                    count += 1
        if isinstance(local, int):
            return local + count
        local.count += count  # counted in what ``routed`` is given
        return local

    # -- cluster entry points ---------------------------------------------------------------

    def publish_from_peer(
        self, message: Message, context: DurableContext = NO_DURABLE_CONTEXT
    ) -> int | Fanout:
        """Retained store and local non-shared subscribers: all of a message another node
        routed here (``context.forward_id``: its id, in the records of every slice). Like
        ``publish``, a plan of more than ``fanout_slices.SLICE`` sessions is routed a slice
        per loop turn: the ``Fanout`` is returned (the node link counts and confirms the
        frame from its ``routed``, and holds its later frames until then)."""
        return self._route_local(message, context)

    def _route_local(self, message: Message, context: DurableContext) -> int | Fanout:
        """The retained store and the local non-shared subscribers (the first step of
        ``publish``): the deliveries made, or the fan-out going on in later loop turns."""
        topic = message.topic
        if message.retain:
            if message.payload:
                self.retained.set(topic, message)
            else:
                self.retained.delete(topic)
        # routed here before (a re-sent PUBLISH routed again: rare): only to the deliveries
        # that ignore a second copy (core.routed_inbound_ids); the context's id is read for
        # QoS 2 only (an attribute of an interpreted class: a generic lookup)
        again = message.qos == 2 and self._routed_before(context.forward_id)
        plan = self.plans.entries.get(topic)
        now = self.now() if message.expires_at is not None else 0.0
        if plan is None:
            matches = self.subscriptions.match(topic)
            if len(matches) > FANOUT_SLICE:  # planned a slice per turn too
                return self.fanouts.add(message, [], now, context, matches, again)
            plan = self._plan(topic, matches)
        origin = message.origin
        waiting = self.fanout_origins
        if again or len(plan) > FANOUT_SLICE or (waiting and origin in waiting):
            return self.fanouts.add(message, plan, now, context, recorded_only=again)
        self.stats.deliveries_routed += len(plan)
        return deliver_planned(plan, message, now, context)

    def _routed_before(self, forward_id: str) -> bool:
        """A QoS 2 message with this forwarded id was routed here already."""
        return (
            bool(forward_id)
            and is_inbound_message_id(forward_id)
            and not self.routed_inbound.first_time(forward_id)
        )

    def publish_shared_from_peer(
        self,
        group: str,
        topic_filter: str,
        message: Message,
        on_done: Callable[[], None] | None = None,
        context: DurableContext = NO_DURABLE_CONTEXT,
    ) -> bool:
        """Another node picked this node for a shared group: deliver to one local member.

        ``on_done`` runs once the member has acknowledged it (at once for QoS 0), or when it
        was handed to another member because this one went away. ``context.hold``: a held
        acknowledgement the member's record holds (a message re-dispatched here).
        """
        found = self.shared.get_group(group, topic_filter)
        picked = None if found is None else found.pick_excluding(offline_members(found))
        if picked is None and found is not None:
            picked = found.pick()  # only offline members: queue for one of them
        if picked is None:
            self.stats.drop("shared_group_gone")
            if on_done is not None:
                on_done()
            return False
        session, sub = picked
        now = self.now() if message.expires_at is not None else 0.0
        qos = min(sub.qos, message.qos)
        ids = (sub.identifier,) if sub.identifier else _NO_IDS
        if message.qos == 2 and message.forward_id and (qos == 0 or session.store is None):
            store = self.store  # an inbound QoS 2 message: the group is claimed first
            if store is not None and shared_claims.claim_id(message):
                return shared_claims.deliver_claimed(
                    self, store, session, sub, message, qos, ids, context.hold, on_done
                )
        if qos == 0:
            if on_done is not None:
                on_done()
            return session.deliver(message, 0, False, ids, sub, now)
        delivery = Delivery(message, qos, False, ids, sub)
        delivery.on_done = on_done
        if session.store is not None:
            if session.room_to_record(message):
                return session.store.record(session, delivery, now, context)
        elif session.deliver_recorded(delivery, now):
            return True
        if on_done is not None:  # dropped (counted): nothing is left to wait for
            on_done()
        return False

    def deliver_direct(
        self, client_id: str, direct: Direct, context: DurableContext = NO_DURABLE_CONTEXT
    ) -> bool:
        """A message for one session this node owns (sent by a node that found it here, or
        by this node's own publisher: ``context.hold``, its held acknowledgement)."""
        message, qos, retain, ids = direct
        session = self.sessions.get(client_id)
        if session is None:
            self.stats.drop("session_gone")
            return False
        now = self.now() if message.expires_at is not None else 0.0
        return session.deliver(message, qos, retain, ids, None, now, context)

    def drop_all_sessions(self) -> None:
        """The node lost its lease: forget every session (their stored copies stay)."""
        for client_id in list(self.sessions):
            self.hand_over(client_id)

    def redispatch(self, delivery: Delivery) -> None:
        """A shared-subscription message its member gave up goes to another member
        (``core.shared_handoff`` decides which may)."""
        share = delivery.share
        if share is None or share.share_group is None:
            return
        message = shared_claims.handed_on(delivery.message)  # the group has it: no claim
        group = self.shared.get_group(share.share_group, share.topic_filter)
        if group is not None and deliver_shared(self, group, message, self.now(), (share.session,)):
            return
        cluster = self.cluster
        if cluster is not None and cluster.forward_shared(
            share.share_group, share.topic_filter, message
        ):
            return
        if group is None:
            self.stats.drop("shared_group_gone")

    # -- AuthEvents -------------------------------------------------------------------------

    def revoke(self, username: str, reason_code: int) -> None:
        for conn in list(self.connections):
            if conn.username == username:
                conn.close_with(reason_code or ReasonCode.NOT_AUTHORIZED)

    def acl_changed(self, username: str | None) -> None:
        for conn in list(self.connections):
            if username is None or conn.username == username:
                conn.refresh_acl()
