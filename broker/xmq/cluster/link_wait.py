"""Messages for a session's new owner that this node has no link to yet.

An orphan append refused by Redis names the session's new owner; the message then goes to it
with DIRECT. A node that has just started (a killed node back under a new epoch) may claim
sessions before the other nodes have dialled it: the new owner is alive but not linked yet.
Its messages wait here, per owner run, until its HELLO arrives; an owner run that is not
linked within ``wait_s`` (it died as well) has them appended to the sessions' Redis queues
while it still owns them, for the next claim to read. A waiting message keeps its publisher's
held acknowledgement (``DurableHold``) held until it has been sent or appended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from xmq.core.message import Message

if TYPE_CHECKING:
    from xmq.core.cluster_ports import DurableHold

Owner = tuple[str, int]
"""node id, run epoch"""
Waiting = tuple[str, Message, int, "DurableHold | None"]
"""client id, message, delivery QoS, the publisher's held ack (held while waiting)"""


class LinkWait:
    """Per owner run, the messages waiting for a link to it (one timer per run)."""

    __slots__ = ("_expired", "_timers", "_waiting", "wait_s")

    def __init__(self, expired: Callable[[Owner, Waiting], None], wait_s: float) -> None:
        self._expired = expired
        self.wait_s = wait_s
        self._waiting: dict[Owner, list[Waiting]] = {}
        self._timers: dict[Owner, asyncio.TimerHandle] = {}

    def __len__(self) -> int:
        """Owner runs with waiting messages."""
        return len(self._waiting)

    def add(
        self,
        owner: Owner,
        client_id: str,
        message: Message,
        qos: int,
        hold: DurableHold | None = None,
    ) -> None:
        waiting = self._waiting.get(owner)
        if waiting is None:
            self._waiting[owner] = waiting = []
            loop = asyncio.get_running_loop()
            self._timers[owner] = loop.call_later(self.wait_s, self._give_up, owner)
        if hold is not None:
            hold.hold()
        waiting.append((client_id, message, qos, hold))

    def take(self, owner: Owner) -> list[Waiting]:
        """The link to ``owner`` is up: its waiting messages, in arrival order (the caller
        releases their holds once it has sent them)."""
        timer = self._timers.pop(owner, None)
        if timer is not None:
            timer.cancel()
        return self._waiting.pop(owner, [])

    def _give_up(self, owner: Owner) -> None:
        del self._timers[owner]
        for waiting in self._waiting.pop(owner, ()):
            self._expired(owner, waiting)
            hold = waiting[3]
            if hold is not None:
                hold.release()
