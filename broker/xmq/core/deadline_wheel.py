"""Deadlines of many connections on one shared timer wheel (keep alive, connect timeout),
and of many parked sessions on another (session expiry: ``Broker.expiries``).

One ``TimerHandle`` per connection (armed at CONNECT, cancelled at close) costs a timer
allocation and a heap operation per connect and per close — under uvloop a libuv timer each —
exactly when thousands of clients reconnect at once. The wheel instead files each entry in a
slot of ``resolution`` seconds (a set add; a set discard when it closes) and runs one timer,
every ``resolution`` seconds while anything is filed.

A due entry is checked lazily: for keep alive, traffic only stamps ``last_seen``; when its slot
comes round, a connection silent for its limit (1.5 x keep alive) is closed with 0x8D, any other
is filed again at ``last_seen + limit`` (``ClientConnection.wheel_due``). So a deadline is acted
on between the deadline and the deadline + 2 x ``resolution``, never before.

A wheel made with ``due`` calls ``due(entry, now)`` instead of the entry's ``wheel_due``: its
entries need only a ``wheel_slot`` (a parked ``Session``, whose expiry the broker acts on),
so an entry costs its slot number and a set entry, not a ``TimerHandle`` (~700 bytes under
uvloop, with its callback and arguments).

A wheel made with ``fence`` (the broker's ``LeaseFence``) acts only while the node can prove
its lease, as its reads do: a tick that finds the fence's deadline passed (after a pause, or
with Redis unreachable) is held until a renewal proves the lease again, or the node went
offline — a keep-alive check must not close a client, nor an expiry publish a delayed will, on
a node whose sessions may already be another node's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol, cast

from xmq.core.lease_fence import LeaseFence

log = logging.getLogger("xmq.connection")

RESOLUTION_S = 0.25
"""Slot width (and timer period): a deadline is acted on at most two of these late."""


class Slotted(Protocol):
    """What a wheel with a ``due`` callback needs of what it files (a parked ``Session``)."""

    wheel_slot: int
    """The wheel's slot holding it, 0 when not filed."""


class WheelEntry(Slotted, Protocol):
    """What the wheel needs of what it files (``ClientConnection``, ``MqttClientProtocol``)."""

    def wheel_due(self, now: float) -> float | None:
        """Its slot came: act (return None) or return its next deadline to be filed again."""
        ...


class DeadlineWheel:
    """Deadlines of many connections, checked by one periodic timer."""

    __slots__ = (
        "_clock",
        "_due",
        "_fence",
        "_handle",
        "_loop",
        "_next",
        "_resolution",
        "_slots",
        "count",
    )

    def __init__(
        self,
        loop: Callable[[], asyncio.AbstractEventLoop],
        resolution: float = RESOLUTION_S,
        due: Callable[[Slotted, float], float | None] | None = None,
        fence: LeaseFence | None = None,
    ) -> None:
        self._loop = loop  # resolved at the first ``add`` (the broker's running loop)
        self._clock: Callable[[], float] | None = None
        self._resolution = resolution
        self._due = due  # None: the entries' own ``wheel_due``
        self._fence = fence  # None: always acts
        self._slots: dict[int, set[Slotted]] = {}
        self._handle: asyncio.TimerHandle | None = None
        self._next = 0  # the first slot not yet processed
        self.count = 0
        """Connections filed."""

    def add(self, client: Slotted, deadline: float) -> None:
        """File ``client`` to be checked at ``deadline`` (loop time), or just after."""
        if client.wheel_slot:
            self.remove(client)
        if self._handle is None:
            self._start()
        slot = int(deadline / self._resolution) + 1  # checked once the loop time >= slot * res
        if slot < self._next:
            slot = self._next  # its slot has been processed already: the next one
        bucket = self._slots.get(slot)
        if bucket is None:
            bucket = self._slots[slot] = set()
        bucket.add(client)
        client.wheel_slot = slot
        self.count += 1

    def remove(self, client: Slotted) -> None:
        """Forget ``client`` (it closed)."""
        slot = client.wheel_slot
        if not slot:
            return
        client.wheel_slot = 0
        bucket = self._slots.get(slot)
        if bucket is not None and client in bucket:
            bucket.discard(client)
            self.count -= 1
            if not bucket:
                del self._slots[slot]

    def _start(self) -> None:
        loop = self._loop()
        if self._clock is None:
            self._clock = loop.time
        # Nothing is filed (the wheel was idle): start counting slots from now.
        self._next = max(self._next, int(self._clock() / self._resolution))
        self._handle = loop.call_later(self._resolution, self._tick)

    def _tick(self) -> None:
        # ``_handle`` stays set while due connections are handled: ``add`` must not start
        # a second timer; the next one is armed below.
        assert self._clock is not None
        now = self._clock()
        fence = self._fence
        if fence is not None and now > fence.deadline:
            # the lease is unproven: nothing is acted on until it is (``_handle`` stays set,
            # so ``add`` starts no second timer; the held tick re-arms it)
            fence.hold(self._tick)
            return
        current = int(now / self._resolution)
        first = self._next
        self._next = current + 1  # a connection filed from here on lands after ``current``
        slots = self._slots
        due_callback = self._due
        if current - first < 64:
            due = [slot for slot in range(first, current + 1) if slot in slots]
        else:  # the loop was blocked for a while
            due = sorted(slot for slot in slots if slot <= current)
        for slot in due:
            bucket = slots.pop(slot, None)
            if bucket is None:
                continue  # emptied meanwhile (its entries closed by an earlier one's action)
            self.count -= len(bucket)
            for client in bucket:
                if client.wheel_slot != slot:
                    continue  # removed meanwhile
                client.wheel_slot = 0
                try:
                    if due_callback is None:
                        deadline = cast(WheelEntry, client).wheel_due(now)
                    else:
                        deadline = due_callback(client, now)
                except Exception:  # one entry's failure must not stop the wheel
                    log.exception("deadline of %r failed", client)
                    continue
                if deadline is not None:
                    self.add(client, deadline)
        self._handle = self._loop().call_later(self._resolution, self._tick) if self.count else None

    def stop(self) -> None:
        """Cancel the timer (the connections stay filed)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
