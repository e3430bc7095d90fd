"""A session's life on this node: attached to a connection, parked, expired, ended.

``attach`` binds a connection to its session (a new one, a restored one, or the one held here,
whose client is taken over); ``detach`` parks it when its connection closes, publishing or
scheduling its will; parked sessions' expiries and delayed wills are entries of
``Broker.expiries`` (``expiry_due``); ``end_session`` removes a session and everything it owns.
``park_unattached`` holds a session whose cluster claim made this node its owner after its
client went away. A session moving to another node leaves through ``Broker.hand_over``.
The caps a session counts against are ``core.node_caps``'s. Compiled (``xmq.native_build``)
with the broker and the connection that call it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from xmq.codec.packets import Will
from xmq.core import shared_handoff
from xmq.core.cluster_claims import apply_restored
from xmq.core.cluster_ports import RestoredSession
from xmq.core.deadline_wheel import Slotted
from xmq.core.message import Message
from xmq.core.node_caps import set_expiry, set_store
from xmq.core.session import Session
from xmq.protocol.connect_terms import SESSION_NEVER_EXPIRES, ConnectTerms

if TYPE_CHECKING:
    from xmq.core.broker import Broker
    from xmq.core.connection import ClientConnection


def attach(
    broker: Broker,
    conn: ClientConnection,
    terms: ConnectTerms,
    restored: RestoredSession | None = None,
    owner: str = "",
) -> tuple[Session, bool]:
    """Bind a connection to its session (taking over a live one); return (session, present).

    ``owner``: the connecting identity (``core.session_access``), recorded with the
    session; the caller has checked that an existing session is not another identity's.
    """
    existing = broker.sessions.get(terms.client_id)
    if existing is not None and existing.connection is not None:
        existing.connection.take_over()  # detaches at once (may end the session)
        existing = broker.sessions.get(terms.client_id)
    present = False
    if existing is not None and terms.clean_start:
        end_session(broker, existing, release=False)
        existing = None
    if existing is None:
        session = Session(terms.client_id, broker.settings.queues, broker.stats)
        broker.sessions[terms.client_id] = session
        if restored is not None:
            set_expiry(broker, session, terms.session_expiry_s)
            if broker.store is not None and terms.session_expiry_s:
                set_store(broker, session, broker.store)
            apply_restored(broker, session, restored)
            present = restored.stored  # else only its inbound ids' incarnation
    else:
        session = existing
        present = True
        cancel_timers(broker, session)
    set_expiry(broker, session, terms.session_expiry_s)
    session.connection = conn
    if owner:
        session.owner = owner
    if broker.store is not None:
        set_store(broker, session, broker.store if terms.session_expiry_s else None)
    return session, present


def detach(broker: Broker, session: Session, conn: ClientConnection, with_will: bool) -> None:
    """A connection closed: keep or end its session, publish or schedule its will."""
    if session.connection is not conn:
        return
    session.connection = None
    if session.store is not None:
        session.store.disconnected(session)
    shared_handoff.member_left(broker, session)
    will = session.will
    session.will = None
    if will is not None and not with_will:
        will = None
    expiry = session.expiry_s
    if expiry == 0:
        end_session(broker, session)
        if will is not None:
            publish_will(broker, will)
        return
    if will is not None:
        delay = 0
        if will.properties is not None and will.properties.will_delay_interval:
            delay = will.properties.will_delay_interval
        delay = min(delay, expiry)
        if delay == 0:
            publish_will(broker, will)
        else:
            # one wheel entry for both deadlines: filed at the will's, which is first
            now = broker.now()
            session.will = will
            if expiry != SESSION_NEVER_EXPIRES:
                session.expires_at = now + expiry
            broker.expiries.add(session, now + delay)
            return
    if expiry != SESSION_NEVER_EXPIRES:
        broker.expiries.add(session, broker.now() + expiry)


def expiry_due(broker: Broker, entry: Slotted, now: float) -> float | None:
    """A parked session's delayed will or expiry came (``expiries``; never early, at most
    two of the wheel's 0.25 s slots late). Unless it was resumed or handed over
    meanwhile: its will is published and it is filed again at its expiry, or, expired,
    it ends (publishing a will still pending)."""
    session = cast(Session, entry)
    if session.connection is not None or broker.sessions.get(session.client_id) is not session:
        return None
    will = session.will
    if will is not None:
        expires_at = session.expires_at
        if not expires_at or now < expires_at:
            session.will = None
            session.expires_at = 0.0
            publish_will(broker, will)
            return expires_at or None  # never expires: not filed again
    end_session(broker, session)
    return None


def cancel_timers(broker: Broker, session: Session) -> None:
    if session.wheel_slot:
        broker.expiries.remove(session)
    session.expires_at = 0.0
    session.will = None  # a resumed session cancels its delayed will


def end_session(broker: Broker, session: Session, release: bool = True) -> None:
    """Remove a session and everything it owns; a delayed will still pending goes out."""
    will = session.will
    cancel_timers(broker, session)
    for flt, sub in list(session.subscriptions.items()):
        broker.remove_subscription(session, flt, sub)
    session.subscriptions.clear()
    shared_handoff.session_ended(broker, session)
    session.discard_queue()
    if broker.sessions.get(session.client_id) is session:
        del broker.sessions[session.client_id]
        set_expiry(broker, session, 0)
        if broker.cluster is not None:
            broker.cluster.session_gone(session, session.store is not None)
        if release and broker.directory is not None:
            broker.directory.release(session.client_id)
    set_store(broker, session, None)
    if will is not None:
        publish_will(broker, will)


def publish_will(broker: Broker, will: Will) -> None:
    message = Message(
        will.topic, will.payload, will.qos, will.retain, will.properties, None, broker.now()
    )
    broker.publish(message)


def park_unattached(
    broker: Broker,
    conn: ClientConnection,
    terms: ConnectTerms,
    restored: RestoredSession | None,
    owner: str,
) -> None:
    """The claim made this node the owner, but its client went away before the CONNACK.

    A persistent session is then held here as if its client had connected and dropped at once
    (no will: its CONNECT was never accepted): its subscriptions are routed to it, its
    messages kept, and it expires like any parked session (its Redis keys get their TTLs).
    Left alone, it would be owned in Redis by a node that does not hold it: messages for it
    only reached its queue by the detour of the hand-over's DIRECT frames, and nothing
    expired it. A session held here already (newer than the stored copy) is left as it is.
    """
    if restored is None or terms.session_expiry_s == 0:
        return
    if broker.sessions.get(terms.client_id) is not None:
        return
    session, _ = attach(broker, conn, terms, restored, owner)
    detach(broker, session, conn, with_will=False)
