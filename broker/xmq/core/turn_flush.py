"""Writing the connections' output: at the end of the read that made it, or once per loop turn.

A connection's writes are kept and written together, for every connection that has output:
the client connections (``mark``: the adapter's ``ClientLink.flush``) and the node links
(``add``: the link's own flush, a bound method it made once). One ``TurnFlush`` per process
(the broker's ``turn_flush``) serves both, so a turn in which a local publisher's message is
forwarded to another node and its PUBACK written costs one ``call_soon`` (a uvloop ``Handle``
and its run), not one for the clients and another for each link. Compiled: ``mark`` and the
flushes are C calls.

Within a client's read callback (``begin_read`` .. ``end_read``, the adapter's
``data_received``) a mark schedules nothing: at the end of the read, the clients it wrote to
are written there and then (``ClientLink.flush_read``), a PUBLISH to its subscriber and the
PUBACK to its publisher each in one ``write`` — no ``call_soon``, no callback of its own: that
machinery cost ~3,800 instructions a point-to-point message, a fifth of the broker's work.
Writes still coalesce per loop turn where it matters: a client written at a read's end at the
same loop time already (``loop.time()`` in whole milliseconds: libuv's clock) waits for the turn's
scheduled flush with whatever else the turn writes to it; and once the turn's flush is
scheduled (that leftover, a node link's frames), every later read of the turn leaves its output
to it. A subscriber that many reads of one busy turn write to gets one write a millisecond at
most at their ends, and the rest of the turn's output in one write at its end, not a write per
read.

The first two clients a read marks (a point-to-point PUBLISH's subscriber and its publisher)
are kept in two slots, not in the list: a list appended to twice and cleared at every read's
end cost ~400 instructions a point-to-point message (CPython frees a cleared list's items and
grows them again at the next append); a third and later ones go to the list.

A node link's read callback (``cluster.peer_link``: the PUBLISH frames of another node, whose
local deliveries are written at its end) is such a read too. A node link's frames made within a
read (``add``: a local publisher's message forwarded) are written at its end as well, unless a
read's end wrote the links' frames at the same loop time already (then they wait for the turn's
flush, like a client's output): a forwarded message goes out with its publisher's read, not a
scheduled callback later (its ``call_soon`` and its run cost ~3,000 instructions, on each node of
a cross-node message at low rates), and the links still get one write a millisecond at most from
the reads of a busy turn.

A connection is marked once per flush (it keeps its own "has output" state); what a flush
writes or causes on another connection in the same callback is written next turn (the lists
are taken before the scheduled flush runs, and a mark meanwhile arms the next callback).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from xmq.core.client_link import ClientLink


class TurnFlush:
    """Runs the marked connections' flushes once per event-loop turn."""

    __slots__ = (
        "_armed",
        "_call_soon",
        "_clients",
        "_links",
        "_links_ms",
        "_read_first",
        "_read_second",
        "_reading",
        "_run",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._clients: list[ClientLink] = []
        self._links: list[Callable[[], None]] = []
        self._armed = False
        self._reading = False  # inside a read callback: its end writes (``end_read``)
        # the first two clients marked in a read not followed by a scheduled flush (the rest:
        # ``_clients``)
        self._read_first: ClientLink | None = None
        self._read_second: ClientLink | None = None
        # the loop time (whole milliseconds) at which a read's end last wrote the links' frames
        self._links_ms = -1
        # bound once (None: the running loop's, at the first mark): compiled,
        # ``loop.call_soon(self._flush)`` looked the method up and made a bound ``_flush``
        # each time it armed (once a loop turn with output)
        self._call_soon: Callable[[Callable[[], None]], object] | None = (
            None if loop is None else loop.call_soon
        )
        self._run: Callable[[], None] = self._flush

    def mark(self, link: ClientLink) -> None:
        """``link`` has output (its first write since its last flush)."""
        if self._reading and not self._armed:
            if self._read_first is None:
                self._read_first = link
                return
            if self._read_second is None:
                self._read_second = link
                return
        self._clients.append(link)
        if not self._armed and not self._reading:
            self._arm()

    def begin_read(self) -> bool:
        """A client's read callback starts: what it marks is written at its ``end_read``.
        False when one is running already (a nested read: the outer one ends it)."""
        if self._reading:
            return False
        self._reading = True
        return True

    def end_read(self, now: float) -> None:
        """The read callback begun by ``begin_read`` ends (``now``: the loop's time): write its
        clients' output now, each not written at this loop time yet, and the node links' frames
        it made, unless a read's end wrote links at this loop time already; the others go to the
        turn's flush. When that flush is scheduled already, everything waits for it."""
        self._reading = False
        first = self._read_first
        second = self._read_second
        if first is not None:
            self._read_first = None
            self._read_second = None
        clients = self._clients
        if self._armed:  # the turn's flush is scheduled already: it writes everything
            if first is not None:
                clients.append(first)
                if second is not None:
                    clients.append(second)
            return
        later = False
        if first is not None:  # (the slots fill before the list)
            if clients:  # a third and later clients
                kept = 0
                for link in clients:
                    if not link.flush_read(now):
                        clients[kept] = link
                        kept += 1
                del clients[kept:]
            if not first.flush_read(now):
                clients.append(first)
            if second is not None and not second.flush_read(now):
                clients.append(second)
            later = len(clients) != 0
        links = self._links
        if links:
            millisecond = int(now * 1000.0 + 0.5)  # (as ``flush_read``: libuv's clock)
            if millisecond == self._links_ms:
                later = True
            else:
                self._links_ms = millisecond
                self._links = []
                for flush in links:
                    flush()
        if later and not self._armed:
            self._arm()

    def add(self, flush: Callable[[], None]) -> None:
        """Call ``flush`` at the end of this turn (a node link's, once per turn), or at the end
        of the read callback running now (``end_read``)."""
        self._links.append(flush)
        if not self._armed and not self._reading:
            self._arm()

    def _arm(self) -> None:
        self._armed = True
        call_soon = self._call_soon
        if call_soon is None:
            call_soon = self._call_soon = asyncio.get_running_loop().call_soon
        call_soon(self._run)

    def _flush(self) -> None:
        self._armed = False
        clients = self._clients
        if clients:
            self._clients = []
            for link in clients:
                link.flush()
        links = self._links
        if links:
            self._links = []
            for flush in links:
                flush()
