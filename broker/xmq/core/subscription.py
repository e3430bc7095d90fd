"""One subscription of one session, and the delivery of a message to a routing plan's subscriptions.

``Subscription`` is the value the routing trees store (``routing.subscription_tree``,
``routing.shared_tree``); ``deliver_planned`` hands a message to every session of a routing
plan (``Broker._route_local``). Compiled with ``core.session``: each ``Session.deliver`` here is
a C call through the native class's vtable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xmq.core.cluster_ports import DurableContext
from xmq.core.message import Message

if TYPE_CHECKING:
    from xmq.core.session import Session


class Subscription:
    """One subscription of one session (the value stored in the routing trees)."""

    __slots__ = (
        "identifier",
        "no_local",
        "qos",
        "retain_as_published",
        "retain_handling",
        "session",
        "share_group",
        "topic_filter",
    )

    def __init__(
        self,
        session: Session,
        topic_filter: str,
        qos: int,
        no_local: bool = False,
        retain_as_published: bool = False,
        retain_handling: int = 0,
        identifier: int | None = None,
        share_group: str | None = None,
    ) -> None:
        self.session = session
        self.topic_filter = topic_filter
        self.qos = qos
        self.no_local = no_local
        self.retain_as_published = retain_as_published
        self.retain_handling = retain_handling
        self.identifier = identifier
        self.share_group = share_group


def deliver_planned(
    plan: list[tuple[Session, Subscription, tuple[int, ...]]],
    message: Message,
    now: float,
    context: DurableContext,
) -> int:
    """Deliver ``message`` to every (session, subscription, identifiers) of a routing plan
    routed in one turn (``Broker._route_local``); the deliveries made. Here, compiled with
    ``Session``, each ``deliver`` and the subscription's fields are C calls and reads; from
    the interpreted broker each was a call through the argument parser (seven arguments)."""
    origin = message.origin
    mqos = message.qos
    retain = message.retain
    count = 0
    for session, sub, ids in plan:
        if sub.no_local and session.client_id == origin:
            continue
        qos = sub.qos if sub.qos < mqos else mqos
        if session.deliver(
            message, qos, retain and sub.retain_as_published, ids, None, now, context
        ):
            count += 1
    return count
