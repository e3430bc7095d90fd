"""What becomes of a shared-subscription message its chosen member has not acknowledged.

MQTT 5.0 4.8.2 binds a QoS 2 message sent to a member to that member's session: the
delivery is completed when the client reconnects [MQTT-4.8.2-4], and if the session ends
first the message is not sent to any other member [MQTT-4.8.2-5]. A QoS 1 message may go to
another member as soon as the connection is lost, and should when the session ends; a message
only queued (never sent) is the group's, not the member's. So:

* the member's connection ends and its session stays (``member_left``): its queued shared
  messages and its QoS 1 ones in flight go to another member now, if the group has one that
  can take them (online, or a persistent session, here or on another node); else they stay
  queued for this member. QoS 2 ones already sent (or with their packet id on the way to
  the store) stay with the session and are completed when it resumes.
* the member's session ends (``session_ended``: expiry, Session Expiry 0 at disconnect, a
  new clean start): QoS 1 and queued ones go to another member (or are dropped and counted
  ``no_shared_member`` when there is none); a QoS 2 one already sent is dropped and counted
  ``xmq_messages_dropped_by_reason_total{reason="shared_session_ended"}``, never re-sent
  elsewhere. One whose PUBREC came (PUBREL sent) was received by the client: nothing lost.
* the session moves to another node with its Redis state (``session_ended(moved=True)``):
  nothing moves; its stored copy answers for its messages.

In a cluster a SHARED frame's message is confirmed to the node that sent it (``on_done``,
SHARED_ACK) once its member acknowledged it, or, QoS 2, once it was sent to the member
(``Session``): from then on the sending node never re-dispatches it, even if the link drops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xmq.core.broker import Broker
    from xmq.core.session import Delivery, Session, Subscription

SESSION_ENDED = "shared_session_ended"
"""Drop reason: a QoS 2 shared message sent to a member whose session ended before it
completed (MQTT-4.8.2-5)."""


def member_left(broker: Broker, session: Session) -> None:
    """The member's connection ended: re-dispatch what another member may take now."""
    if not session.inflight and not session.queue:
        return
    answers: dict[tuple[str, str], bool] = {}

    def movable(share: Subscription) -> bool:
        key = (share.share_group or "", share.topic_filter)
        found = answers.get(key)
        if found is None:
            found = answers[key] = has_other_member(broker, share, session)
        return found

    store = session.store
    for delivery in session.take_shared(movable):
        if store is not None and delivery.record is not None:
            store.acknowledged(session, delivery)  # its record leaves the session's queue
        broker.redispatch(delivery)


def session_ended(broker: Broker, session: Session, moved: bool = False) -> None:
    """The member's session ends (or ``moved`` to another node): settle its shared messages
    before its queue and in-flight window are forgotten."""
    if not session.inflight and not session.queue:
        return
    if moved:
        for delivery in _shared_of(session):
            _settled(delivery)
        return
    stats = broker.stats
    for delivery in _shared_of(session):
        if delivery.packet_id and delivery.qos == 2 and not delivery.owed:
            if not delivery.released:
                stats.drop(SESSION_ENDED)  # sent to this member only (MQTT-4.8.2-5)
            _settled(delivery)
        else:
            _settled(delivery)  # this node answers for it now
            broker.redispatch(delivery)


def has_other_member(broker: Broker, share: Subscription, session: Session) -> bool:
    """True when a member other than ``session`` could take a message of ``share``'s group:
    one online or with a persistent session on this node, or any member on another node."""
    group = share.share_group
    if group is None:
        return False
    found = broker.shared.get_group(group, share.topic_filter)
    if found is not None:
        for member in found.members:
            if member is not session and (member.connection is not None or member.expiry_s):
                return True
    cluster = broker.cluster
    return cluster is not None and cluster.has_shared(group, share.topic_filter)


def _shared_of(session: Session) -> list[Delivery]:
    shared = [d for d in session.inflight.values() if d.share is not None]
    shared.extend(d for d in session.queue if d.share is not None)
    return shared


def _settled(delivery: Delivery) -> None:
    on_done = delivery.on_done
    if on_done is not None:
        delivery.on_done = None
        on_done()
