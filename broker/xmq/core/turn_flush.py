"""One scheduled callback per loop turn writes every connection's output: clients and node links.

A connection's writes of a loop turn are kept and written once, at the end of the turn's
callbacks, for every connection that has output: the client connections (``mark``: the
adapter's ``ClientLink.flush``) and the node links (``add``: the link's own flush, a bound
method it made once). One ``TurnFlush`` per process (the broker's ``turn_flush``) serves
both, so a turn in which a local publisher's message is forwarded to another node and its
PUBACK written costs one ``call_soon`` (a uvloop ``Handle`` and its run), not one for the
clients and another for each link. Compiled: ``mark`` and the flushes are C calls.

A connection is marked once per turn (it keeps its own "has output" state); what a flush
writes or causes on another connection in the same callback is written next turn (the lists
are taken before the flushes run, and a mark meanwhile arms the next callback).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from xmq.core.client_link import ClientLink


class TurnFlush:
    """Runs the marked connections' flushes once per event-loop turn."""

    __slots__ = ("_armed", "_call_soon", "_clients", "_links", "_run")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._clients: list[ClientLink] = []
        self._links: list[Callable[[], None]] = []
        self._armed = False
        # bound once (None: the running loop's, at the first mark): compiled,
        # ``loop.call_soon(self._flush)`` looked the method up and made a bound ``_flush``
        # each time it armed (once a loop turn with output)
        self._call_soon: Callable[[Callable[[], None]], object] | None = (
            None if loop is None else loop.call_soon
        )
        self._run: Callable[[], None] = self._flush

    def mark(self, link: ClientLink) -> None:
        """``link`` has output this turn (its first write of the turn)."""
        self._clients.append(link)
        if not self._armed:
            self._arm()

    def add(self, flush: Callable[[], None]) -> None:
        """Call ``flush`` at the end of this turn (a node link's, once per turn)."""
        self._links.append(flush)
        if not self._armed:
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
