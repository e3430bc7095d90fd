"""Writes to a client that wait for the durable store: exactly-once QoS 2 across a kill -9.

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

if TYPE_CHECKING:
    from xmq.core.session import Delivery, Session

NOT_OWED = 0
"""``Delivery.owed``: nothing of the delivery waits to be written."""
WAITING = 1
"""Its PUBLISH (PUBREL once released) waits for the store to answer the write of its state."""
READY = 2
"""The store answered: the write waits only for the writes owed before it (or a connection)."""


def owe(session: Session, delivery: Delivery, now: float, release: bool) -> None:
    """Queue the delivery's next write behind the owed ones: its PUBLISH, or (``release``)
    its PUBREL. A QoS 2 record's write waits for the store (``ids_first``), then
    ``Session.state_recorded`` lets it go; anything else goes as soon as its turn comes."""
    owed = session.owed
    if owed is None:
        owed = session.owed = deque()
    owed.append(delivery)
    store = session.store
    if store is None or not store.ids_first or delivery.record is None or delivery.qos != 2:
        delivery.owed = READY
        write_due(session, now)
    else:
        delivery.owed = WAITING
        if release:
            store.released(session, delivery)
        else:
            store.sent(session, delivery)


def write_due(session: Session, now: float) -> bool:
    """Write the owed packets from the head while they are ready; True when a PUBLISH too
    large for the client was dropped (a window slot came free)."""
    owed = session.owed
    conn = session.connection
    if owed is None or conn is None:
        return False
    inflight = session.inflight
    dropped = False
    while owed and owed[0].owed == READY:
        delivery = owed.popleft()
        delivery.owed = NOT_OWED
        packet_id = delivery.packet_id
        if inflight.get(packet_id) is not delivery:
            continue  # acknowledged, taken back or dropped meanwhile
        if delivery.released:
            conn.link.write(pubrel_bytes(packet_id, 0, conn.version))
        elif not conn.send_publish(
            delivery.message,
            delivery.qos,
            delivery.retain,
            delivery.subscription_ids,
            packet_id,
            now,
        ):
            # too large for this client: skipped as the spec says, and its record with it
            # (a resumed session would otherwise hold it in flight for ever)
            del inflight[packet_id]
            dropped = True
            if session.store is not None:
                session.store.acknowledged(session, delivery)
            if delivery.on_done is not None:
                delivery.on_done()
    if not owed:
        session.owed = None
    return dropped
