"""Sessions and outbound delivery: in-flight windows, bounded queues, QoS 1/2 state.

A ``Session`` outlives its connections (its queue and the bytes it holds against the limits:
``core.session_queue``). Outbound QoS 1/2 messages are ``Delivery`` records:
queued until the client's in-flight window (its Receive Maximum) has room, then in flight
under a packet id until acknowledged. QoS 0 goes straight to the connection or is dropped.
While queued, a plain one (or one with a durable record) is not an object at all but two
words in the session's ``DeliveryQueue`` (out of the garbage collector's sight:
``core.delivery_queue``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from xmq.codec.packets import PacketType, Will
from xmq.core.cluster_ports import NO_DURABLE_CONTEXT, DurableContext
from xmq.core.delivery_queue import NOTHING_QUEUED as NOTHING_QUEUED
from xmq.core.delivery_queue import Delivery as Delivery
from xmq.core.delivery_queue import DeliveryQueue
from xmq.core.inflight_window import InflightWindow
from xmq.core.memory_cost import DELIVERY_COST
from xmq.core.message import Message
from xmq.core.owed_writes import hold_for, owe, write, write_due, write_new
from xmq.core.session_queue import QueueLimits as QueueLimits
from xmq.core.session_queue import SessionQueue
from xmq.core.subscription import Subscription as Subscription
from xmq.protocol.outbound_qos import (
    COMPLETE,
    NOTHING,
    RECORD_STATE,
    WAIT_TURN,
    WRITE_PUBLISH,
    WRITE_PUBLISH_DUP,
    WRITE_PUBREL,
    no_flight_for,
)
from xmq.protocol.packet_ids import PacketIdAllocator

if TYPE_CHECKING:
    from xmq.core.cluster_ports import DurableHold, DurableStore
    from xmq.core.inbound_ids import InboundMessageIds
    from xmq.core.session_client import SessionClient
    from xmq.core.stats import BrokerStats

_NO_IDS: tuple[int, ...] = ()


class _NoInboundIds:
    """The shared empty set of inbound QoS 2 packet ids (see ``delivery_queue._NothingQueued``):
    read like a ``set``, never written. A plain class, not a ``set`` subclass: mypyc compiles
    this module, and it cannot inherit from a builtin type."""

    __slots__ = ()

    def __contains__(self, packet_id: object) -> bool:
        return False

    def __len__(self) -> int:
        return 0

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (set, frozenset, _NoInboundIds)) and not other

    def __hash__(self) -> int:
        return 0

    def discard(self, packet_id: int) -> None:
        pass

    def add(self, packet_id: int) -> None:
        raise RuntimeError("a session's inbound ids must be allocated first (inbound_for_update)")

    def update(self, *others: object) -> None:
        raise RuntimeError("a session's inbound ids must be allocated first (inbound_for_update)")


InboundIds = set[int] | _NoInboundIds
"""A session's inbound QoS 2 packet ids: its own ``set``, or the shared empty one."""

NO_INBOUND_IDS: _NoInboundIds = _NoInboundIds()


class Session(SessionQueue):
    """State of one client id: subscriptions, outbound deliveries, inbound QoS 2 ids (its queue
    and the bytes it holds: ``SessionQueue``, the base class)."""

    __slots__ = (
        "client_id",
        "connection",
        "expires_at",
        "expiry_s",
        "inbound_ids",
        "inbound_qos2",
        "inflight",
        "owed",
        "owner",
        "packet_ids",
        "store",
        "subscriptions",
        "wheel_slot",
        "will",
    )

    def __init__(
        self, client_id: str, limits: QueueLimits, stats: BrokerStats, expiry_s: int = 0
    ) -> None:
        super().__init__(limits, stats)
        self.client_id = client_id
        self.connection: SessionClient | None = None
        self.subscriptions: dict[str, Subscription] = {}
        self.inflight = InflightWindow()  # by packet id, in the order they went out
        self.inbound_qos2: InboundIds = NO_INBOUND_IDS  # allocated on first use
        # a persistent session in a cluster: its inbound QoS 2 message ids (core.inbound_ids)
        self.inbound_ids: InboundMessageIds | None = None
        self.packet_ids = PacketIdAllocator()
        self.expiry_s = expiry_s
        self.wheel_slot = 0  # parked with an expiry: its slot in ``Broker.expiries`` (0: none)
        self.will: Will | None = None
        # parked with a delayed will pending (filed in ``Broker.expiries`` at the will's
        # time): the loop time it expires at (0.0: never, or no delayed will pending)
        self.expires_at = 0.0
        self.store: DurableStore | None = None  # set for persistent sessions in a cluster
        self.owed: deque[Delivery] | None = None  # writes waiting for the store (owed_writes)
        self.owner = ""  # the identity it belongs to (core.session_access; '': not recorded)

    # -- outbound ---------------------------------------------------------------------------

    def deliver(
        self,
        message: Message,
        qos: int,
        retain: bool,
        subscription_ids: tuple[int, ...] = _NO_IDS,
        share: Subscription | None = None,
        now: float = 0.0,
        context: DurableContext = NO_DURABLE_CONTEXT,
    ) -> bool:
        """Send or queue a message; False when it was dropped (limits, oversize, offline).

        A persistent session in a cluster records a QoS 1/2 message first
        (``DurableStore.record``, with ``context``: what waits for the record, and the id of
        a message that came over a node link)."""
        conn = self.connection
        if qos == 0:
            if conn is None or not conn.accepts_qos0():
                self.stats.drop("qos0_not_writable" if conn is not None else "qos0_offline")
                return False
            return conn.send_publish(message, 0, retain, subscription_ids, 0, now)
        if self.store is not None:
            if not self.room_to_record(message):
                return False
            delivery = Delivery(message, qos, retain, subscription_ids, share)
            return self.store.record(self, delivery, now, context)
        inflight = self.inflight
        if (
            conn is not None
            and self.queue.length == 0  # (a native int: ``words`` was a truth test's call)
            and inflight.count < conn.send_window
            and not conn.link.congested
        ):
            # The hot path, inlined: in flight under the next free packet id (a slot of a list,
            # ``core.inflight_window``), then started under it and written
            delivery = Delivery(message, qos, retain, subscription_ids, share)
            packet_id = inflight.put_next(self.packet_ids, delivery)
            if write_new(conn, delivery, packet_id, now):
                return True
            inflight.remove(packet_id)
            return False  # too large for this client: skipped as the spec says
        if share is None and len(subscription_ids) < 2:
            return self._enqueue_words(message, qos, retain, subscription_ids)
        return self._enqueue(Delivery(message, qos, retain, subscription_ids, share))

    def deliver_recorded(self, delivery: Delivery, now: float) -> bool:
        """Send or queue a QoS 1/2 delivery (after its durable record, when there is one)."""
        conn = self.connection
        if conn is not None and self._goes_out_now(conn):
            return self._send_new(conn, delivery, now)
        return self._enqueue(delivery)

    def _goes_out_now(self, conn: SessionClient) -> bool:
        """A new delivery would be written now, not queued (``deliver`` inlines this)."""
        return (
            self.queue.length == 0
            and self.inflight.count < conn.send_window
            and not conn.link.congested
        )

    def room_to_record(self, message: Message) -> bool:
        """Before a durable record is written for a delivery: False (the drop counted) when it
        would have to be queued and the queue or the memory budget has no room, so that it is
        neither recorded nor queued and the caller knows now (a held ack then says 0x97)."""
        conn = self.connection
        if conn is not None and self._goes_out_now(conn):
            return True
        return self._room_for(message, DELIVERY_COST)  # (its record's cost: when queued)

    def inbound_for_update(self) -> set[int]:
        """The session's own inbound QoS 2 ids (allocated now if still the shared empty)."""
        ids = self.inbound_qos2
        if isinstance(ids, set):
            return ids
        own: set[int] = set()
        self.inbound_qos2 = own
        return own

    def inbound_received(self, packet_id: int, hold: DurableHold | None = None) -> None:
        """An inbound QoS 2 PUBLISH was accepted: its packet id is kept until PUBREL (and
        recorded by a persistent session's store; ``hold``, the PUBREC waiting for that)."""
        self.inbound_for_update().add(packet_id)
        store = self.store
        if store is not None:
            store.inbound_changed(self, packet_id, True, hold)

    def inbound_released(self, packet_id: int, hold: DurableHold | None = None) -> None:
        """PUBREL received (or the PUBLISH failed): the inbound QoS 2 packet id is free again
        (and removed from a persistent session's store; ``hold``, the PUBCOMP waiting)."""
        ids = self.inbound_qos2
        if packet_id in ids:
            ids.discard(packet_id)
            message_ids = self.inbound_ids
            generation = message_ids.released(packet_id) if message_ids is not None else None
            store = self.store
            if store is not None:
                store.inbound_changed(self, packet_id, False, hold, generation)

    def _send_new(self, conn: SessionClient, delivery: Delivery, now: float) -> bool:
        packet_id = self.inflight.put_next(self.packet_ids, delivery)
        store = self.store
        action = delivery.start(packet_id, hold_for(self, delivery) if store is not None else 0)
        if action != WRITE_PUBLISH:  # in flight now, written in its turn (owed_writes)
            owe(self, delivery, action, now)
        elif write(conn, delivery, action, now):
            if store is not None:
                store.sent(self, delivery)
        else:
            self.inflight.remove(packet_id)
            delivery.give_up()
            return False  # too large for this client: skipped as the spec says
        if delivery.qos == 2 and delivery.on_done is not None:
            _bound_to_member(delivery)
        return True

    def pump(self, now: float) -> None:
        """Move queued deliveries into the in-flight window while there is room."""
        conn = self.connection
        queue = self.queue
        if conn is None or not queue.words:
            return
        window = conn.send_window
        inflight = self.inflight
        stats = self.stats
        link = conn.link
        words = queue.words
        while words and inflight.count < window and not link.congested:
            delivery = queue.popleft()
            self.unqueued(delivery)
            if delivery.message.expired(now):
                stats.messages_expired += 1
                continue
            self._send_new(conn, delivery, now)

    def on_puback(self, packet_id: int, now: float) -> int:
        """PUBACK received: the state machine's action (``protocol.outbound_qos``), carried
        out here when it is ``COMPLETE``; ``VIOLATION`` is for the caller to close on."""
        inflight = self.inflight
        delivery = inflight.get(packet_id)
        if delivery is None:
            return NOTHING  # a late duplicate
        action = delivery.on_puback()
        if action != COMPLETE:
            return action  # a violation: still in flight
        inflight.remove(packet_id)
        # ``_completed``, inlined: the hot path's acknowledgement
        if self.store is not None:
            self.store.acknowledged(self, delivery)
        if delivery.on_done is not None:
            delivery.on_done()
        if self.queue.length:
            self.pump(now)
        return action

    def on_pubcomp(self, packet_id: int, now: float) -> int:
        """PUBCOMP received (see ``on_puback``)."""
        delivery = self.inflight.get(packet_id)
        if delivery is None:
            return NOTHING
        action = delivery.on_pubcomp()
        if action == COMPLETE:
            self._completed(delivery, now)
        return action

    def on_pubrec(self, packet_id: int, reason: int, now: float) -> int:
        """PUBREC received: the delivery is released and its PUBREL written or owed, or (a
        reason >= 0x80) complete; ``NOT_FOUND`` and ``VIOLATION`` are for the caller."""
        delivery = self.inflight.get(packet_id)
        if delivery is None:
            return no_flight_for(PacketType.PUBREC)
        store = self.store
        action = delivery.on_pubrec(reason, hold_for(self, delivery) if store is not None else 0)
        if action == WRITE_PUBREL:
            if store is not None:
                store.released(self, delivery)
            if self.connection is not None:
                write(self.connection, delivery, action, now)
        elif action in (RECORD_STATE, WAIT_TURN):
            owe(self, delivery, action, now)
        elif action == COMPLETE:
            self._completed(delivery, now)
        return action

    def _completed(self, delivery: Delivery, now: float) -> None:
        """The delivery's flight is over: its packet id is free, its record goes."""
        self.inflight.remove(delivery.packet_id)
        if self.store is not None:
            self.store.acknowledged(self, delivery)
        if delivery.on_done is not None:
            delivery.on_done()
        if self.queue.length:
            self.pump(now)

    def state_recorded(self, delivery: Delivery, now: float) -> None:
        """The store answered the write of an owed delivery's packet id or PUBREC state."""
        if delivery.recorded() and write_due(self, now):
            self.pump(now)

    def resend_inflight(self, conn: SessionClient, now: float) -> None:
        """After a resumed session reconnects: re-send in-flight messages with DUP set (and
        the PUBRELs of released ones); the owed writes go in their turn (``write_due``)."""
        for packet_id, delivery in self.inflight.items():  # (a list: in the order sent)
            action = delivery.resend()
            if action == WRITE_PUBLISH_DUP and delivery.qos == 1 and delivery.message.expired(now):
                # a QoS 2 PUBLISH once sent is not expired (MQTT-4.3.3-7)
                delivery.give_up()
                self.inflight.remove(packet_id)
                self.stats.messages_expired += 1
            elif action:
                write(conn, delivery, action, now)
        write_due(self, now)
        self.pump(now)

    def take_shared(self, movable: Callable[[Subscription], bool]) -> list[Delivery]:
        """Remove and return the shared-group deliveries another member may take now: the
        queued ones and the QoS 1 ones in flight whose subscription is ``movable`` (its
        group has another member). A QoS 2 one with a packet id stays (core.shared_handoff)."""
        taken = [
            d
            for d in self.inflight.values()
            if d.share is not None and d.qos == 1 and movable(d.share)
        ]
        for delivery in taken:
            self.inflight.remove(delivery.packet_id)
            delivery.give_up()
        queue = self.queue
        if any(d.share is not None for d in queue.held()):
            kept = DeliveryQueue()
            for delivery in queue:
                if delivery.share is not None and movable(delivery.share):
                    taken.append(delivery)
                    self.unqueued(delivery)
                else:
                    kept.append(delivery)
            queue.clear()
            self.queue = kept
        for delivery in taken:  # the caller re-dispatches them: it answers for them now
            if delivery.on_done is not None:
                delivery.on_done()
                delivery.on_done = None
        return taken

    def discard_queue(self) -> None:
        """Drop everything owed to this session (it ended)."""
        self.clear_queue()
        self.inflight.clear()
        self.owed = None


def _bound_to_member(delivery: Delivery) -> None:
    """A QoS 2 shared-group message from another node now has a packet id with its member:
    it is that session's (MQTT-4.8.2-4/-5), so its sender is told at once and never
    re-dispatches it (core.shared_handoff)."""
    on_done = delivery.on_done
    delivery.on_done = None
    if on_done is not None:
        on_done()
