"""Who may use a session, and what a CONNECT may leave behind (the checks of ``login_flow``).

A session belongs to the identity that created it: the authenticated user name (the account,
the certificate's user, the SCRAM user), or ``anonymous`` for a client without one. A CONNECT
by another identity with that client id never inherits it: with the ``refuse`` policy (the
default) it is refused with 0x87 Not authorized (3.1.1: return code 5) and the session's
client is left alone; with ``clean_start`` the old session is discarded (its client, if
connected, is taken over with 0x8E) and the newcomer starts clean. The identity is kept with
the session in memory (``Session.owner``) and, in a cluster, in the session's owner record and
stored state in Redis, so a claim on another node applies the same rule.

A session resumed by its own identity is re-checked against the identity's *current* rules
(``recheck_resumed``): they may have been revoked while it was offline.

A will is checked like a PUBLISH of its topic (``will_refusal``): topic name rules, no ``$``
topic, the ACL's publish rule with the will's QoS and retain flag.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from xmq.codec.reason_codes import ReasonCode
from xmq.core.auth_ports import ClientAcl, is_reserved_topic
from xmq.routing.topics import TopicError, validate_topic_name

if TYPE_CHECKING:
    from xmq.codec.packets import Will
    from xmq.core.broker import Broker
    from xmq.core.session import Delivery, Session

ANONYMOUS: Final = "anonymous"
"""The identity of clients without a user name (one identity: every anonymous client)."""
REFUSE: Final = "refuse"
"""Policy: a CONNECT of another identity is refused (0x87); the session is not disturbed."""
CLEAN_START: Final = "clean_start"
"""Policy: a CONNECT of another identity discards the session and starts clean."""
FOREIGN_POLICIES: Final = (REFUSE, CLEAN_START)

ACL_REVOKED: Final = "acl_revoked"
"""``stats.drop`` reason of a resumed message the user may no longer read."""


def identity_of(username: str | None) -> str:
    """The identity a session is recorded under (never empty)."""
    return ANONYMOUS if username is None else "user:" + username


def is_foreign(session: Session, identity: str) -> bool:
    """True when ``session`` belongs to another identity (``''``: not recorded, no check)."""
    owner = session.owner
    return bool(owner) and owner != identity


def will_refusal(
    will: Will, acl: ClientAcl, max_topic_length: int, max_topic_levels: int
) -> tuple[int, str] | None:
    """The CONNACK reason refusing a will (None: it may be published), as for a PUBLISH."""
    topic = will.topic
    try:
        validate_topic_name(topic, max_topic_length, max_topic_levels)
    except TopicError as error:
        return error.reason_code, f"will topic: {error}"
    if is_reserved_topic(topic):
        return ReasonCode.NOT_AUTHORIZED, "will topic is reserved ($)"
    if not acl.can_publish(topic, will.qos, will.retain):
        return ReasonCode.NOT_AUTHORIZED, "will not authorized"
    return None


def recheck_resumed(broker: Broker, session: Session, acl: ClientAcl) -> tuple[int, int]:
    """Apply the identity's current rules to a resumed session; return (subscriptions
    removed, messages dropped).

    A subscription the rules no longer allow is removed (in Redis too, for a persistent
    session in a cluster). A queued or in-flight message on a topic the user may no longer
    subscribe to is dropped (``stats.drop("acl_revoked")``) and its durable record deleted;
    a QoS 2 message already released (PUBREC received: only its PUBREL is owed, no content)
    and one whose write is still owed to the store are kept.
    """
    removed = 0
    for key, sub in list(session.subscriptions.items()):
        if not acl.can_subscribe(key, sub.qos):
            broker.unsubscribe(session, key)
            removed += 1
    if removed:
        broker.stats.subscriptions_revoked += removed
    dropped = 0
    readable: dict[tuple[str, int], bool] = {}

    def unreadable(delivery: Delivery) -> bool:
        key = (delivery.message.topic, delivery.qos)
        allowed = readable.get(key)
        if allowed is None:
            allowed = readable[key] = acl.can_subscribe(key[0], key[1])
        return not allowed

    for packet_id, delivery in list(session.inflight.items()):
        if delivery.released or delivery.owed or not unreadable(delivery):
            continue
        del session.inflight[packet_id]
        delivery.give_up()
        _forget(broker, session, delivery)
        dropped += 1
    if session.queue and any(unreadable(d) for d in session.queue):
        queued = list(session.queue)
        session.queue.clear()
        for delivery in queued:
            if not delivery.owed and unreadable(delivery):
                session.unqueued(delivery)
                _forget(broker, session, delivery)
                dropped += 1
            else:
                session.queue.append(delivery)
    return removed, dropped


def _forget(broker: Broker, session: Session, delivery: Delivery) -> None:
    broker.stats.drop(ACL_REVOKED)
    if session.store is not None:
        session.store.acknowledged(session, delivery)  # its record goes
    if delivery.on_done is not None:
        delivery.on_done()
        delivery.on_done = None
