"""Delivering a message to one member of a shared subscription group on this node.

``deliver_shared`` picks an online member (round robin, ``routing.shared_tree``), else queues
for an offline persistent one; an inbound QoS 2 message is claimed for the group first
(``core.shared_claims``). With a cluster, ``shared_elsewhere`` sends the message to another
node's members when none is online here. ``Broker.publish`` routes through them, and
``Broker.publish_shared_from_peer`` and ``Broker.redispatch`` (a member gave a message up,
``core.shared_handoff``) use them. Compiled (``xmq.native_build``) with the broker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xmq.core import shared_claims
from xmq.core.cluster_ports import NO_DURABLE_CONTEXT, ClusterRouter, DurableContext, DurableHold
from xmq.core.message import Message
from xmq.core.session import Session, Subscription
from xmq.routing.shared_tree import SharedGroup

if TYPE_CHECKING:
    from xmq.core.broker import Broker

_NO_IDS: tuple[int, ...] = ()


def offline_members(group: SharedGroup[Session, Subscription]) -> set[Session]:
    return {session for session in group.members if session.connection is None}


def shared_elsewhere(
    cluster: ClusterRouter,
    group: SharedGroup[Session, Subscription],
    message: Message,
    hold: DurableHold | None,
) -> bool:
    """Local members first; with none online here, another node's members get it."""
    for session in group.members:
        if session.connection is not None:
            return False
    if not cluster.has_shared(group.group, group.topic_filter):
        return False
    return cluster.forward_shared(group.group, group.topic_filter, message, hold)


def deliver_shared(
    broker: Broker,
    group: SharedGroup[Session, Subscription],
    message: Message,
    now: float,
    exclude: tuple[Session, ...],
    context: DurableContext = NO_DURABLE_CONTEXT,
) -> bool:
    """Deliver to one member of a shared group: an online one if any, else a queue."""
    tried: set[Session] = set(exclude)
    fallback: tuple[Session, Subscription] | None = None
    while True:
        picked = group.pick_excluding(tried)
        if picked is None:
            break
        session, sub = picked
        tried.add(session)
        if session.connection is None:
            if fallback is None and session.expiry_s:
                fallback = picked
            continue
        qos = min(sub.qos, message.qos)
        ids = (sub.identifier,) if sub.identifier else _NO_IDS
        if message.qos == 2 and message.forward_id and (qos == 0 or session.store is None):
            store = broker.store  # an inbound QoS 2 message: the group is claimed first
            if store is not None and shared_claims.claim_id(message):
                return shared_claims.deliver_claimed(
                    broker, store, session, sub, message, qos, ids, context.hold, None
                )
        return session.deliver(message, qos, False, ids, sub, now, context)
    if fallback is not None:
        session, sub = fallback
        ids = (sub.identifier,) if sub.identifier else _NO_IDS
        qos = min(sub.qos, message.qos)
        return session.deliver(message, qos, False, ids, sub, now, context)
    broker.stats.drop("no_shared_member")
    return False
