"""Brute-force guard: failed logins per user name and per source address are rate-limited.

Sans-IO (the caller's clock). Each key has a leaky bucket of failures that drains at
`limit / window` per second; while a bucket is full, logins for that key are refused
without checking the password (so a guessing attack costs no slow hashing either).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GuardPolicy:
    failures_per_user: int = 5
    failures_per_address: int = 30
    window_seconds: float = 60.0
    max_tracked: int = 100_000

    def __post_init__(self) -> None:
        if self.failures_per_user < 1 or self.failures_per_address < 1:
            raise ValueError("failure limits must be positive")
        if self.window_seconds <= 0 or self.max_tracked < 1:
            raise ValueError("window and max_tracked must be positive")


def peer_address(peer: str) -> str:
    """ "1.2.3.4:5678" -> "1.2.3.4"; "[::1]:5678" -> "::1"."""
    host, sep, port = peer.rpartition(":")
    if not sep or not port.isdigit():
        return peer
    return host.strip("[]")


class _Buckets:
    __slots__ = ("_limit", "_drain_per_second", "_max", "_levels")

    def __init__(self, limit: int, window: float, max_tracked: int) -> None:
        self._limit = limit
        self._drain_per_second = limit / window
        self._max = max_tracked
        self._levels: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def _level(self, key: str, now: float) -> float:
        entry = self._levels.get(key)
        if entry is None:
            return 0.0
        level, stamp = entry
        level = max(0.0, level - (now - stamp) * self._drain_per_second)
        if level == 0.0:
            del self._levels[key]
        return level

    def level(self, key: str, now: float) -> float:
        return self._level(key, now)

    def full(self, key: str, now: float) -> bool:
        # Full when one more failure would exceed the limit (a bucket drains continuously,
        # so N failures in quick succession leave it just under N).
        return self._level(key, now) > self._limit - 1

    def add(self, key: str, now: float) -> None:
        level = self._level(key, now) + 1.0
        self._levels[key] = (level, now)
        self._levels.move_to_end(key)
        while len(self._levels) > self._max:
            self._levels.popitem(last=False)

    def reset(self, key: str) -> None:
        self._levels.pop(key, None)


class LoginGuard:
    __slots__ = ("_addresses", "_clock", "_good", "_max_good", "_users", "refused")

    def __init__(
        self, policy: GuardPolicy | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        policy = policy or GuardPolicy()
        self._users = _Buckets(policy.failures_per_user, policy.window_seconds, policy.max_tracked)
        self._addresses = _Buckets(
            policy.failures_per_address, policy.window_seconds, policy.max_tracked
        )
        self._clock = clock
        self._good: OrderedDict[str, None] = OrderedDict()  # addresses with a recent success
        self._max_good = policy.max_tracked
        self.refused = 0
        """Logins refused by the guard (a counter for metrics)."""

    def allowed(self, username: str | None, peer: str) -> bool:
        now = self._clock()
        blocked = self._addresses.full(peer_address(peer), now) or (
            username is not None and self._users.full(username, now)
        )
        if blocked:
            self.refused += 1
        return not blocked

    def address_rank(self, address: str) -> float:
        """How the hashing pool ranks a source address (lowest first): -1 when a login from
        it succeeded lately and none failed since, else its recent failed logins (its
        bucket's level; 0: none)."""
        level = self._addresses.level(address, self._clock())
        if level > 0.0:
            return level
        return -1.0 if address in self._good else 0.0

    def record_failure(self, username: str | None, peer: str) -> None:
        now = self._clock()
        self._addresses.add(peer_address(peer), now)
        if username is not None:
            self._users.add(username, now)

    def record_success(self, username: str | None, peer: str) -> None:
        if username is not None:
            self._users.reset(username)
        good = self._good
        good[peer_address(peer)] = None
        good.move_to_end(peer_address(peer))
        while len(good) > self._max_good:
            good.popitem(last=False)
