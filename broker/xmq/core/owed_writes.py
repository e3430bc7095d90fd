"""The one write of a delivery's packets, and the writes that wait for the durable store.

``write`` is the only place a QoS 1/2 delivery's PUBLISH or PUBREL is written: a new one
(``Session.deliver``, ``Session.pump``), an owed one whose turn came (``write_due``), a re-send
after a reconnect (``Session.resend_inflight``) and a PUBREL after a PUBREC. Which of them is
due is for the delivery's state machine to say (``protocol.outbound_qos``).

With ``persistence.max_queued_writes: 0`` the store sets ``DurableStore.ids_first``: a QoS 2
PUBLISH to a persistent session goes out only once the store has answered the write of its
packet id (``session:inflight``), and a PUBREL only once it has answered ``<id>:r``. A node
that resumes the session after a kill -9 then re-sends what the client may have seen under the
same packet id (PUBLISH with DUP, or PUBREL), never the message under a new id, and never a
PUBLISH after a PUBREL the client has already completed.

Meanwhile the delivery holds its packet id and its place in the in-flight window, and its write
waits in the session's ``owed`` queue. Writes leave that queue in the order they were owed: a
later PUBLISH (also a QoS 1 one, which waits for nothing itself) goes behind, so no message
overtakes one whose packet id is still being written. With no connection (the client went
away) the writes wait for the next one (``Session.resend_inflight``).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from xmq.codec.writer import pubrel_bytes
from xmq.core.delivery_queue import Delivery
from xmq.protocol.outbound_qos import (
    AFTER_STORE,
    IN_TURN,
    RECORD_STATE,
    SEND_NOW,
    WRITE_PUBLISH_DUP,
    WRITE_PUBREL,
)

if TYPE_CHECKING:
    from xmq.core.session import Session
    from xmq.core.session_client import SessionClient


def write(conn: SessionClient, delivery: Delivery, action: int, now: float) -> bool:
    """Write what ``action`` (``WRITE_PUBLISH``, ``WRITE_PUBLISH_DUP``, ``WRITE_PUBREL``) says
    for ``delivery``; False when its PUBLISH exceeds the client's Maximum Packet Size."""
    if action == WRITE_PUBREL:
        conn.link.write(pubrel_bytes(delivery.packet_id, 0, conn.version))
        return True
    return conn.send_publish(
        delivery.message,
        delivery.qos,
        delivery.retain,
        delivery.subscription_ids,
        delivery.packet_id,
        now,
        action == WRITE_PUBLISH_DUP,
    )


def write_new(conn: SessionClient, delivery: Delivery, packet_id: int, now: float) -> bool:
    """The hot path's first send (``Session.deliver``, nothing owed, no store): a new delivery
    started under ``packet_id`` and written now, in one call (compiled, its ``start`` and
    ``write`` are C calls); False when its PUBLISH exceeds the client's Maximum Packet Size
    (skipped, as the spec says)."""
    return write(conn, delivery, delivery.start(packet_id, SEND_NOW), now)


def hold_for(session: Session, delivery: Delivery) -> int:
    """How the delivery's next write (its PUBLISH, or its PUBREL) must wait: ``AFTER_STORE``
    for a recorded QoS 2 one when the store writes ids first, ``IN_TURN`` behind owed
    writes (or with ids first: its turn comes at once), else ``SEND_NOW`` (0)."""
    store = session.store
    if store is None:
        return 0
    if store.ids_first and delivery.qos == 2:
        return AFTER_STORE if delivery.record is not None else IN_TURN
    return IN_TURN if session.owed is not None else 0


def owe(session: Session, delivery: Delivery, action: int, now: float) -> None:
    """Queue the delivery's next write (its state machine said ``RECORD_STATE`` or
    ``WAIT_TURN``) behind the owed ones. For ``RECORD_STATE`` the store is asked to record
    its state (its packet id, or ``<id>:r`` once released), then ``Session.state_recorded``
    lets it go; a ``WAIT_TURN`` goes as soon as its turn comes."""
    owed = session.owed
    if owed is None:
        owed = session.owed = deque()
    owed.append(delivery)
    store = session.store
    if action == RECORD_STATE and store is not None:
        if delivery.released:
            store.released(session, delivery)
        else:
            store.sent(session, delivery)
    else:
        write_due(session, now)


def write_due(session: Session, now: float) -> bool:
    """Write the owed packets from the head while they are due; True when a PUBLISH too
    large for the client was dropped (a window slot came free)."""
    owed = session.owed
    conn = session.connection
    if owed is None or conn is None:
        return False
    inflight = session.inflight
    dropped = False
    while owed and not owed[0].waits_for_store:
        delivery = owed.popleft()
        packet_id = delivery.packet_id
        if inflight.get(packet_id) is not delivery:
            continue  # acknowledged, taken back or dropped meanwhile
        action = delivery.due()
        if action and not write(conn, delivery, action, now):
            # too large for this client: skipped as the spec says, and its record with it
            # (a resumed session would otherwise hold it in flight for ever)
            delivery.give_up()
            inflight.remove(packet_id)
            dropped = True
            if session.store is not None:
                session.store.acknowledged(session, delivery)
            if delivery.on_done is not None:
                delivery.on_done()
    if not owed:
        session.owed = None
    return dropped
