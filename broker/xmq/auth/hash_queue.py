"""The order in which slow password hashes run: fair between source addresses (sans-IO).

Every login that needs a slow hash (a password check, the timing shield's throwaway check of
an unknown user name) is a job keyed by its source address. ``FairHashQueue`` decides which
job runs next when a worker is free:

- an address has at most ``per_address`` jobs hashing at once, and at most
  ``queued_per_address`` waiting: more are refused at once (``push`` returns False; the login
  is answered 0x9F, and it is not counted as a failed login);
- of the addresses with a job waiting (and none too many running), the next job comes from
  the one ranked first by its *rank* (``LoginGuard.address_rank``: -1 for an address with a
  recent successful login and no failure since, else its recent failed logins), then by when
  it was last served: round-robin among equals.

So a flood of wrong logins from many addresses cannot queue a login from an address that
logged in before (a reconnecting device), nor — once the flood's addresses have failed, which
each does with its first attempt — one from an address without failures: that login waits
only for the hashes already running, then takes the next free worker. Addresses that keep
failing share what is left, one job each per round. What this cannot tell apart is a first
login from a new address arriving together with a burst of first attempts from as many new
addresses: it takes its round-robin turn among them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

Job = TypeVar("Job")


class FairHashQueue(Generic[Job]):
    """Per-address queues of hash jobs, served by rank then round-robin."""

    __slots__ = (
        "_rank",
        "_queues",
        "_running",
        "_served",
        "_turn",
        "max_queued",
        "per_address",
        "queued",
        "queued_per_address",
        "refused",
    )

    def __init__(
        self,
        rank: Callable[[str], float] = lambda address: 0.0,
        per_address: int = 1,
        queued_per_address: int = 4,
        max_queued: int = 10_000,
    ) -> None:
        if per_address < 1 or queued_per_address < 0 or max_queued < 1:
            raise ValueError("per_address and max_queued must be positive")
        self._rank = rank
        self.per_address = per_address
        self.queued_per_address = queued_per_address
        self.max_queued = max_queued
        self._queues: dict[str, deque[Job]] = {}
        self._running: dict[str, int] = {}
        self._served: dict[str, int] = {}  # address -> turn it was last served (round-robin)
        self._turn = 0
        self.queued = 0
        self.refused = 0
        """Jobs refused (too many from one address, or in all): a counter for metrics."""

    def push(self, address: str, job: Job) -> bool:
        """Queue ``job`` for ``address``; False (refused) when its address has too many."""
        queue = self._queues.get(address)
        waiting = len(queue) if queue is not None else 0
        held = waiting + self._running.get(address, 0)
        if held >= self.per_address + self.queued_per_address or self.queued >= self.max_queued:
            self.refused += 1
            return False
        if queue is None:
            queue = self._queues[address] = deque()
        queue.append(job)
        self.queued += 1
        return True

    def pop(self) -> tuple[str, Job] | None:
        """The next job to run (its address counted as running until ``done``), or None."""
        best: str | None = None
        best_rank = (0.0, 0)
        running = self._running
        for address in self._queues:
            if running.get(address, 0) >= self.per_address:
                continue
            rank = (self._rank(address), self._served.get(address, -1))
            if best is None or rank < best_rank:
                best, best_rank = address, rank
        if best is None:
            return None
        queue = self._queues[best]
        job = queue.popleft()
        if not queue:
            del self._queues[best]
        self.queued -= 1
        running[best] = running.get(best, 0) + 1
        self._turn += 1
        self._served[best] = self._turn
        if len(self._served) > 4 * self.max_queued:  # forget addresses served long ago
            self._served = {a: t for a, t in self._served.items() if t > self._turn // 2}
        return best, job

    def done(self, address: str) -> None:
        """A job of ``address`` finished (or was abandoned before it ran)."""
        left = self._running.get(address, 0) - 1
        if left > 0:
            self._running[address] = left
        else:
            self._running.pop(address, None)

    def remove(self, address: str, job: Job) -> bool:
        """Take a job that has not run yet out of the queue (its login went away)."""
        queue = self._queues.get(address)
        if queue is None:
            return False
        try:
            queue.remove(job)
        except ValueError:
            return False
        self.queued -= 1
        if not queue:
            del self._queues[address]
        return True

    def running(self) -> int:
        return sum(self._running.values())
