"""Self-fencing: a node acts for its sessions only while it can prove its lease is valid.

The membership renews the node's lease in Redis every ``ttl / 5``. A renewal that succeeded
proves the lease valid until ``start of that renewal + ttl`` (the key's ``PX`` counts from when
Redis ran the command, which is after we sent it). Past ``that - margin`` on this node's
monotonic loop clock the node cannot prove it any more: it may have been paused (SIGSTOP, a
stalled VM) or cut from Redis, and another node may already own its sessions.

``LeaseFence.deadline`` is that instant (loop time; ``inf`` without a cluster and while the
node is offline, when it owns nothing and answers CONNECT with 0x88 by itself). Every read
path — a client's bytes, a node link's frames — compares it with the loop's clock on entry
(one attribute load and one float comparison) and, past it, *holds* what it read instead of
acting on it (no routing, no acknowledgement, no record), and the fence asks the membership to
re-validate at once. A renewal that succeeds moves the deadline and lets the held reads run, in
order; a renewal that finds the lease gone takes the node offline (its connections and links
close, the held bytes are dropped with them: nothing they carried was acknowledged).
"""

from __future__ import annotations

import math
from collections.abc import Callable

FENCE_MARGIN = 0.1
"""Fraction of the lease TTL kept as a safety margin (scheduling delay, clock rate drift)."""


class LeaseFence:
    """Until when this node may act for its sessions, and the reads held past that."""

    __slots__ = ("_held", "_on_doubt", "deadline", "holds")

    def __init__(self) -> None:
        self.deadline = math.inf
        self._held: list[Callable[[], None]] = []
        self._on_doubt: Callable[[], None] | None = None
        self.holds = 0  # how many times a read was held (a metric)

    def watch(self, on_doubt: Callable[[], None]) -> None:
        """``on_doubt`` is called when a read finds the deadline passed (re-validate now)."""
        self._on_doubt = on_doubt

    def hold(self, resume: Callable[[], None]) -> None:
        """A read past the deadline: ``resume`` runs once the lease is proven again, or once
        the node went offline (its connection is closed by then and drops what it held)."""
        self._held.append(resume)
        self.holds += 1
        if len(self._held) == 1 and self._on_doubt is not None:
            self._on_doubt()

    @property
    def waiting(self) -> int:
        return len(self._held)

    def proven(self, renewal_started: float, ttl_s: float) -> None:
        """A renewal begun at ``renewal_started`` (loop time) succeeded."""
        self.deadline = renewal_started + ttl_s * (1.0 - FENCE_MARGIN)
        self._release()

    def lift(self) -> None:
        """Nothing to fence: no cluster, or offline (no sessions, links closed)."""
        self.deadline = math.inf
        self._release()

    def expire(self) -> None:
        """The lease is known lost: hold every read from now on until ``proven``/``lift``."""
        self.deadline = -math.inf

    def _release(self) -> None:
        held, self._held = self._held, []
        for resume in held:
            resume()
