"""The Redis round-trip histogram: each round trip counted once, in the first bucket whose
bound is at least its duration (the last bucket: above every bound)."""

from __future__ import annotations

import pytest

from xmq.store.redis_errors import ROUND_TRIP_BOUNDS as REEXPORTED
from xmq.store.redis_errors import RedisStats as Reexported
from xmq.store.redis_stats import ROUND_TRIP_BOUNDS, RedisStats


def _bucket(seconds: float) -> int:
    """The histogram's rule, spelled out."""
    for index, bound in enumerate(ROUND_TRIP_BOUNDS):
        if seconds <= bound:
            return index
    return len(ROUND_TRIP_BOUNDS)


SAMPLES = [
    0.0,
    0.0001,
    *ROUND_TRIP_BOUNDS,  # a duration equal to a bound is counted in that bound's bucket
    *(bound * 1.0001 for bound in ROUND_TRIP_BOUNDS),  # just above: the next one
    *(bound * 0.9999 for bound in ROUND_TRIP_BOUNDS),
    7.5,
    1e9,
]


@pytest.mark.parametrize("seconds", SAMPLES)
def test_a_round_trip_lands_in_the_first_bucket_whose_bound_holds_it(seconds: float) -> None:
    stats = RedisStats()
    stats.round_trip(seconds)
    expected = [0] * (len(ROUND_TRIP_BOUNDS) + 1)
    expected[_bucket(seconds)] = 1
    assert stats.rtt_counts == expected
    assert stats.rtt_count == 1
    assert stats.rtt_total == seconds


def test_the_histogram_sums_many_round_trips() -> None:
    stats = RedisStats()
    for seconds in SAMPLES:
        stats.round_trip(seconds)
    assert stats.rtt_count == len(SAMPLES) == sum(stats.rtt_counts)
    assert stats.rtt_counts == [
        sum(1 for seconds in SAMPLES if _bucket(seconds) == index)
        for index in range(len(ROUND_TRIP_BOUNDS) + 1)
    ]
    assert stats.rtt_counts[-1] == 3  # 5.0005 s, 7.5 s and 1e9 s: above every bound
    assert stats.rtt_total == pytest.approx(sum(SAMPLES))


def test_the_counters_are_re_exported_where_they_were() -> None:
    assert Reexported is RedisStats
    assert REEXPORTED is ROUND_TRIP_BOUNDS
