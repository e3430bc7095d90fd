"""Token buckets for connection-rate and publish-rate limits (sans-IO: callers pass ``now``)."""

from __future__ import annotations


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up; may go negative (debt)."""

    __slots__ = ("_stamp", "burst", "rate", "tokens")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = burst if burst > 0 else max(rate, 1.0)
        self.tokens = self.burst
        self._stamp = now

    def _refill(self, now: float) -> None:
        elapsed = now - self._stamp
        if elapsed > 0:
            self.tokens = min(self.burst, self.tokens + elapsed * self.rate)
            self._stamp = now

    def try_take(self, now: float, count: float = 1.0) -> bool:
        """Take ``count`` tokens if there are that many (connection admission)."""
        self._refill(now)
        if self.tokens >= count:
            self.tokens -= count
            return True
        return False

    def charge(self, now: float, count: float) -> float:
        """Take ``count`` tokens even into debt; return seconds until the debt is repaid."""
        self._refill(now)
        self.tokens -= count
        if self.tokens >= 0:
            return 0.0
        return -self.tokens / self.rate
