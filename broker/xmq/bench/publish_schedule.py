"""Pacing by schedule: message m of a worker is due at t0 + m / rate, never by sleep drift.

The worker's publishers share one timer. Each tick sends every message whose time has come,
round-robin over the publishers (message m goes to publisher m mod N), one write per publisher
per tick, and re-arms for the next due message (at least ``min_tick_s`` later). A late tick
sends its backlog at once and records how late the oldest message was (the client's send lag).
The minimum tick is 1 ms: uvloop's timers have millisecond resolution and round shorter delays
down to zero, which would spin the loop between closely spaced messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from time import monotonic_ns
from typing import Protocol


class Publisher(Protocol):
    def publish(self, count: int, now_ns: int) -> None: ...


class PublishSchedule:
    def __init__(
        self,
        publishers: Sequence[Publisher],
        rate_per_publisher: float,
        messages_per_publisher: int,
        t0_ns: int,
        *,
        on_lag: Callable[[int], None] | None = None,
        min_tick_s: float = 0.001,
    ) -> None:
        self.publishers = list(publishers)
        count = len(self.publishers)
        self.total = messages_per_publisher * count
        self.rate = rate_per_publisher * count
        self.t0_ns = t0_ns
        self.next_index = 0
        self.min_tick_s = min_tick_s
        self.handle: asyncio.TimerHandle | None = None
        self.done_ns = 0
        self.on_lag = on_lag

    def due_by(self, now_ns: int) -> int:
        """How many messages are due at ``now_ns`` (those scheduled at or before it)."""
        if now_ns < self.t0_ns or self.rate <= 0:
            return 0
        return min(self.total, int((now_ns - self.t0_ns) * self.rate / 1e9) + 1)

    def scheduled_ns(self, index: int) -> int:
        return self.t0_ns + int(index * 1e9 / self.rate)

    def start(self) -> None:
        if not self.publishers or self.total == 0:
            self.done_ns = self.t0_ns
            return
        self._arm(monotonic_ns())

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None

    def _arm(self, now_ns: int) -> None:
        delay = max((self.scheduled_ns(self.next_index) - now_ns) / 1e9, self.min_tick_s)
        self.handle = asyncio.get_running_loop().call_later(delay, self.tick)

    def tick(self) -> None:
        now = monotonic_ns()
        self.send_due(now)
        if self.next_index < self.total:
            self._arm(now)
        else:
            self.handle = None
            self.done_ns = now

    def send_due(self, now: int) -> int:
        """Send what is due at ``now``; returns the number of messages sent."""
        first = self.next_index
        due = self.due_by(now)
        if due <= first:
            return 0
        if self.on_lag is not None:
            self.on_lag((now - self.scheduled_ns(first)) // 1000)
        publishers = self.publishers
        count = len(publishers)
        if due - first <= count:
            for index in range(first, due):
                publishers[index % count].publish(1, now)
        else:
            for position, publisher in enumerate(publishers):
                sends = _count_congruent(due - 1, position, count) - _count_congruent(
                    first - 1, position, count
                )
                if sends:
                    publisher.publish(sends, now)
        self.next_index = due
        return due - first


def _count_congruent(upto: int, residue: int, modulus: int) -> int:
    """How many m in [0, upto] have m mod ``modulus`` == ``residue``."""
    if upto < residue:
        return 0
    return (upto - residue) // modulus + 1
