"""A node link's write buffer, bounded: the local publishers feeding a congested link wait.

Outbound, the transport's write buffer is bounded (``WRITE_HIGH`` / ``WRITE_LOW``): above its
high-water mark (``pause_writing``) the local publishers whose messages are being forwarded
over the link have their sockets paused, as the durable store pauses them while its records
wait, until it drains below the low-water mark (``resume_writing``). Frames are written once
per loop turn (by the process's per-turn flush, ``core.turn_flush``, with the clients'
output: one scheduled callback for both), and one turn can read a publisher many times
(libuv reads a readable socket up to 32 times per wake-up while it is not paused: 8 MiB of
256 KiB reads), so the link does not wait for the transport: frames of this turn that would
take the buffer past ``WRITE_HIGH`` make it congested at once (``send``, ``ROOM_MEASURED``
says how the room is known); if the turn's write
then fits under the mark after all, the transport has paused nothing and the publishers are
resumed after it. The frames that a read of the link itself causes on it (its PUBLISH_ACK;
after HELLO, RESUME and the route snapshot) are written at the end of that read instead,
without a scheduled callback: one write per read. Frames that a client's read causes (a
forwarded PUBLISH) are written at the end of that read, at most once a loop millisecond
(``TurnFlush.end_read``); and a read of the link is a read of the per-turn flush too: the local
subscribers its frames deliver to are written at its end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from xmq.core.broker import Broker
    from xmq.core.message import Message
    from xmq.core.ports import SessionClient

WRITE_HIGH: Final = 1 << 20
"""The link's write buffer above which its local publishers are paused (bytes)."""

WRITE_LOW: Final = 256 << 10
"""... and below which they are resumed."""

ROOM_MEASURED: Final = WRITE_HIGH // 2
"""A link's room under ``WRITE_HIGH`` is bounded from below without asking the transport:
the bytes written since it was last measured count as still buffered (the buffer cannot
have grown by more). The write measures it again (``get_write_buffer_size``) only when that
bound falls under this, and ``send`` when a turn's frames would pass it: one measure in
~512 KiB written, not one per write, and congestion still declared exactly when a turn's
frames would take the buffer as it is past ``WRITE_HIGH``."""


def pause_publisher(broker: Broker, paused: set[SessionClient], message: Message) -> None:
    """``message`` goes over a congested link: pause its local publisher (again if another
    pauser, the store, resumed it meanwhile: pausing is idempotent) and note it in
    ``paused``, the link's set resumed when its buffer drains."""
    if message.origin is None:
        return
    session = broker.sessions.get(message.origin)
    conn = session.connection if session is not None else None
    if conn is not None:
        paused.add(conn)
        conn.link.pause_reading()
