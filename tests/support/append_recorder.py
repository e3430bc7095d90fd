"""A durable store standing in for Redis in the cluster unit tests: it records every
``APPEND_IF_OWNER`` and lets the test answer them (pure logic; the integration tests use a real
Redis)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from xmq.core.cluster_ports import DurableHold
from xmq.core.message import Message


class AppendRecorder:
    """Records appends; ``answer`` plays Redis's reply to the oldest one still unanswered."""

    def __init__(self) -> None:
        self.appends: list[tuple[str, tuple[str, int], bytes]] = []
        """(client id, expected owner, payload) per append, in order."""
        self.messages: list[Message] = []
        """The message of each append, in order."""
        self.on_moved: list[Callable[[str, int], None]] = []
        self.changed = asyncio.Event()
        self._replies: list[tuple[Callable[[str, int], None], DurableHold | None]] = []

    def append_if_owner(
        self,
        client_id: str,
        owner: tuple[str, int],
        message: Message,
        qos: int,
        retain: bool,
        on_moved: Callable[[str, int], None],
        hold: DurableHold | None = None,
    ) -> None:
        self.appends.append((client_id, owner, message.payload))
        self.messages.append(message)
        self.on_moved.append(on_moved)
        if hold is not None:
            hold.hold()  # released by ``answer``, as the real store does on Redis's reply
        self._replies.append((on_moved, hold))
        self.changed.set()

    def answer(self, moved_to: tuple[str, int] | None = None) -> None:
        """Redis answers the oldest append: appended, or refused naming another owner."""
        on_moved, hold = self._replies.pop(0)
        if moved_to is not None:
            on_moved(*moved_to)
        if hold is not None:
            hold.release()

    async def flush(self) -> None:
        return None

    def written(self) -> bool:
        return True
