"""The counted frames a node link sends, and keeps until its peer confirms them.

PUBLISH, DIRECT and (when both ends count them) SHARED frames are numbered on each link
(``published_out``). Those that matter if the link dies — a frame for a node with persistent
sessions, every DIRECT, a SHARED frame holding its publisher's ack, any frame sent while the
link is resuming — are kept in ``unconfirmed`` with the publisher's held ack (a
``DurableHold``) until the peer's PUBLISH_ACK says they are in its records (``confirmed``); a
dead link's kept frames are appended for its persistent sessions instead
(``ClusterHub.drop_link``), and a resumed link sends again those its peer had not handled
(``resend_from``). At most ``MAX_UNCONFIRMED`` are kept: the oldest beyond it are given up.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xmq.cluster.peer_link import PeerLink
    from xmq.core.cluster_ports import DurableHold
    from xmq.core.message import Message

Unconfirmed = tuple[int, "Message", "DurableHold | None", "tuple[str, int] | int | None"]
"""frame sequence, message, the publisher's held ack, and what the frame was: ``None`` a
PUBLISH, ``(client id, QoS)`` a DIRECT, an ``int`` a SHARED frame (its shared sequence)"""

MAX_UNCONFIRMED = 100_000
"""PUBLISH / DIRECT frames kept for a peer that has not confirmed them (bounds memory if it
stalls; the oldest beyond it are given up, their held acks released)."""


def send_direct(
    link: PeerLink,
    data: bytes,
    client_id: str,
    message: Message,
    qos: int,
    hold: DurableHold | None,
) -> None:
    """Send a DIRECT frame, kept (with ``hold``) until the peer has recorded it."""
    link.forwarding(message)
    link.published_out += 1
    keep(link, (link.published_out, message, hold, (client_id, qos)))
    if not link.resuming:
        link.send(data)


def send_shared(
    link: PeerLink, data: bytes, sequence: int, message: Message, hold: DurableHold | None
) -> None:
    """Send a SHARED frame. The receiver counts it with PUBLISH and DIRECT frames: its
    PUBLISH_ACK says the member's record is written (or the message was handed to the
    member), which releases ``hold``; until then the hold is kept with the frame. A peer
    that does not count them (an older node) holds nothing."""
    link.forwarding(message)
    if not link.shared_counted:
        link.send(data)
        return
    link.published_out += 1
    if hold is not None or link.resuming:
        keep(link, (link.published_out, message, hold, sequence))
    if not link.resuming:
        link.send(data)


def keep(link: PeerLink, entry: Unconfirmed) -> None:
    """Keep a sent frame (its hold taken) until the peer confirms it."""
    hold = entry[2]
    if hold is not None:
        hold.hold()
    unconfirmed = link.unconfirmed
    unconfirmed.append(entry)
    if len(unconfirmed) > MAX_UNCONFIRMED:
        dropped = unconfirmed.popleft()[2]
        if dropped is not None:
            dropped.release()


def confirmed(link: PeerLink, count: int, reasons: dict[int, int] | None = None) -> None:
    """The peer has the first ``count`` PUBLISH, DIRECT (and SHARED, when counted) frames
    in its records: their held acks are released (one batch per PUBLISH_ACK). ``reasons``:
    the frames among them it delivered nowhere (every delivery dropped for a quota), by
    frame number: their held acks are told (``undelivered``)."""
    unconfirmed = link.unconfirmed
    while unconfirmed and unconfirmed[0][0] <= count:
        number, _, hold, _ = unconfirmed.popleft()
        if hold is not None:
            if reasons and (reason := reasons.get(number)):
                hold.undelivered(reason)
            else:
                hold.release()


def resend_from(
    link: PeerLink, handled: int, frame_of: Callable[[Unconfirmed], bytes | None]
) -> int:
    """The peer's RESUME: it has handled the first ``handled`` counted frames of this
    run. Kept frames after those are sent again in order, numbered from ``handled + 1``
    (``frame_of`` rebuilds each; ``None``: nothing to send, its hold is released); those
    it handled stay kept until its PUBLISH_ACK. Returns how many were sent again."""
    link.resuming = False
    kept: deque[Unconfirmed] = deque()
    again: list[Unconfirmed] = []
    for entry in link.unconfirmed:
        (kept if entry[0] <= handled else again).append(entry)
    link.unconfirmed = kept
    link.published_out = handled
    sent = 0
    for _, message, hold, what in again:
        data = frame_of((0, message, hold, what))
        if data is None:
            if hold is not None:
                hold.release()
            continue
        link.published_out += 1
        kept.append((link.published_out, message, hold, what))  # its hold is still taken
        link.send(data)
        sent += 1
    return sent
