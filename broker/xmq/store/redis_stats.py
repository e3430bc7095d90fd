"""The counters of one node's Redis connection (read by ``/metrics``), compiled.

The batcher counts every pipeline's round trip here (``round_trip``: a histogram), at least one
per durable message at low rates; interpreted, that call and its loop over the bounds cost
~2,500 instructions per pipeline, more than the reply's own handling. Re-exported by
:mod:`xmq.store.redis_errors`.
"""

from __future__ import annotations

from collections import Counter

ROUND_TRIP_BOUNDS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    5.0,
)
"""The histogram's upper bounds, in seconds (``xmq_redis_round_trip_seconds``)."""


class RedisStats:
    """Counters of one node's Redis connection, read by ``/metrics``."""

    __slots__ = (
        "_bounds",
        "errors",
        "given_up",
        "master_changes",
        "recovered",
        "retries",
        "rtt_count",
        "rtt_counts",
        "rtt_total",
    )

    def __init__(self) -> None:
        self.errors: Counter[str] = Counter()  # by kind
        self.retries: Counter[str] = Counter()  # commands sent again, by the kind of failure
        self.given_up = 0  # writes that finally failed
        self.recovered = 0  # commands answered after failing at least once
        self.master_changes = 0  # a new master address (Sentinel failover)
        self.rtt_counts: list[int] = [0] * (len(ROUND_TRIP_BOUNDS) + 1)
        self.rtt_count = 0
        self.rtt_total = 0.0
        self._bounds: tuple[float, ...] = ROUND_TRIP_BOUNDS

    def error(self, kind: str) -> None:
        self.errors[kind] += 1

    def retried(self, kind: str) -> None:
        self.retries[kind] += 1

    def round_trip(self, seconds: float) -> None:
        self.rtt_count += 1
        self.rtt_total += seconds
        index = 0  # the first bucket whose bound is >= seconds (the last: above every bound)
        for bound in self._bounds:  # (an attribute: a module tuple is a dict look-up per use)
            if seconds <= bound:
                break
            index += 1
        self.rtt_counts[index] += 1
