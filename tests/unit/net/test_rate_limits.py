"""Token buckets: admission (no debt) and publish throttling (debt -> pause time)."""

from __future__ import annotations

import pytest

from xmq.net.rate_limits import TokenBucket


def test_admission_allows_the_burst_then_the_rate() -> None:
    bucket = TokenBucket(rate=2, burst=3, now=0.0)
    assert [bucket.try_take(0.0) for _ in range(4)] == [True, True, True, False]
    assert not bucket.try_take(0.4)
    assert bucket.try_take(0.5)  # one token refilled after 0.5 s at 2/s
    assert not bucket.try_take(0.5)
    assert bucket.try_take(100.0)
    assert bucket.tokens == pytest.approx(2.0)  # capped at the burst


def test_default_burst_is_one_second() -> None:
    assert TokenBucket(rate=50, burst=0, now=0).burst == 50
    assert TokenBucket(rate=0.5, burst=0, now=0).burst == 1


def test_charge_returns_the_pause_needed() -> None:
    bucket = TokenBucket(rate=10, burst=5, now=0.0)
    assert bucket.charge(0.0, 5) == 0.0
    assert bucket.charge(0.0, 10) == pytest.approx(1.0)  # 10 tokens of debt at 10/s
    assert bucket.charge(1.0, 0) == 0.0  # repaid
