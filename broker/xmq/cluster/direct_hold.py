"""Messages for one session this node owns in Redis, sent before the session is attached here.

When a persistent session's owner is gone, publishing nodes append its messages to its Redis
queue (``APPEND_IF_OWNER``). Once a node has claimed the session, the appends are refused with
that node's id and the messages go to it directly: over the link (DIRECT), or, when the
publisher is on the claiming node itself, straight here. The claim has then run in Redis, but
the claiming CONNECT may not have attached the session yet (its reply is read in the same loop
iteration as the refusals, and the CONNECT resumes after them). Such messages are held, per
client id and in arrival order, until the session is attached (one timer per held client id,
not per message). A message for a session that is neither here nor being claimed (its client
went away during the claim, or the session was just handed over to another node) goes to the
session's Redis queue while this node still owns it there; the next claim reads it from there.

A message may carry its publisher's held acknowledgement (``DurableHold``): it is held while
the message waits here and passed in the ``DurableContext`` of its delivery, with the
message's cluster-wide id, so the session's record of it holds the ack in turn.

The re-check is a timer: one that fires while the node cannot prove its lease (after a pause)
is held by the lease fence like a read, and runs once the lease is proven again (or the node
went offline, when nothing is here any more and the messages go to Redis, fenced there).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from xmq.core.cluster_ports import Direct, DurableContext

if TYPE_CHECKING:
    from xmq.core.cluster_ports import DurableHold
    from xmq.core.lease_fence import LeaseFence
    from xmq.core.session import Session

__all__ = ["Direct", "DirectHold", "LocalSessions"]

POLL_S = 0.005


class LocalSessions(Protocol):
    """What the hold needs of the broker core."""

    @property
    def sessions(self) -> dict[str, Session]: ...

    @property
    def claiming(self) -> dict[str, int]: ...

    @property
    def fence(self) -> LeaseFence: ...

    def deliver_direct(self, client_id: str, direct: Direct, context: DurableContext) -> bool: ...


NotHere = Callable[[str, Direct, "DurableHold | None"], None]


class DirectHold:
    """Delivers DIRECT messages to attached sessions, holding them while a claim runs."""

    __slots__ = ("_broker", "_held", "_not_here", "max_hold_s")

    def __init__(self, broker: LocalSessions, not_here: NotHere, max_hold_s: float) -> None:
        self._broker = broker
        self._not_here = not_here
        self.max_hold_s = max_hold_s
        self._held: dict[str, list[tuple[Direct, DurableHold | None]]] = {}

    def __len__(self) -> int:
        """Client ids with held messages."""
        return len(self._held)

    def deliver(self, client_id: str, direct: Direct, hold: DurableHold | None = None) -> None:
        held = self._held.get(client_id)
        if held is not None:
            self._keep(held, direct, hold)  # behind the ones already waiting: arrival order
            return
        broker = self._broker
        if client_id in broker.sessions:
            self._deliver(client_id, direct, hold)
            return
        if client_id in broker.claiming:
            self._held[client_id] = held = []
            self._keep(held, direct, hold)
            loop = asyncio.get_running_loop()
            loop.call_later(POLL_S, self._check, client_id, loop.time() + self.max_hold_s)
            return
        self._not_here(client_id, direct, hold)

    @staticmethod
    def _keep(
        held: list[tuple[Direct, DurableHold | None]], direct: Direct, hold: DurableHold | None
    ) -> None:
        if hold is not None:
            hold.hold()
        held.append((direct, hold))

    def _deliver(self, client_id: str, direct: Direct, hold: DurableHold | None) -> None:
        # The session's record holds the ack, and takes the message's cluster-wide id.
        self._broker.deliver_direct(client_id, direct, DurableContext(hold, direct[0].forward_id))

    def _check(self, client_id: str, deadline: float) -> None:
        broker = self._broker
        loop = asyncio.get_running_loop()
        fence = broker.fence
        if loop.time() > fence.deadline:  # the lease is unproven: act once it is
            fence.hold(lambda: self._check(client_id, deadline))
            return
        if (
            client_id not in broker.sessions
            and client_id in broker.claiming
            and loop.time() < deadline
        ):
            loop.call_later(POLL_S, self._check, client_id, deadline)
            return
        for direct, hold in self._held.pop(client_id, ()):
            if client_id in broker.sessions:
                self._deliver(client_id, direct, hold)
            else:
                self._not_here(client_id, direct, hold)
            if hold is not None:
                hold.release()
