"""A compact log-bucket latency histogram (HDR-like), in microseconds.

Values below 32 µs have their own bucket; above, every power of two is split into 16 buckets, so
a bucket's width is at most 1/16 (6.25%) of its lower bound. 512 buckets cover beyond an hour.
Histograms from several processes merge by adding their counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

SUB_BUCKET_BITS = 4
_DIRECT = 1 << (SUB_BUCKET_BITS + 1)  # 32: values below have their own bucket
BUCKETS = 512


def bucket_index(value_us: int) -> int:
    """The bucket of a latency in microseconds (negative values count as 0)."""
    if value_us < _DIRECT:
        return value_us if value_us > 0 else 0
    shift = value_us.bit_length() - (SUB_BUCKET_BITS + 1)
    index = (shift << SUB_BUCKET_BITS) + (value_us >> shift)
    return index if index < BUCKETS else BUCKETS - 1


def bucket_bounds(index: int) -> tuple[int, int]:
    """``[low, high)`` of a bucket in microseconds."""
    if index < _DIRECT:
        return index, index + 1
    shift = (index >> SUB_BUCKET_BITS) - 1
    top = index - (shift << SUB_BUCKET_BITS)
    return top << shift, (top + 1) << shift


class LatencyHistogram:
    """Counts per bucket plus the exact count, sum and maximum."""

    __slots__ = ("counts", "total", "sum_us", "max_us")

    def __init__(self) -> None:
        self.counts = [0] * BUCKETS
        self.total = 0
        self.sum_us = 0
        self.max_us = 0

    def record(self, value_us: int) -> None:
        self.counts[bucket_index(value_us)] += 1
        self.total += 1
        self.sum_us += value_us
        if value_us > self.max_us:
            self.max_us = value_us

    def record_many(self, values_us: Iterable[int]) -> None:
        for value in values_us:
            self.record(value)

    def merge(self, other: LatencyHistogram) -> None:
        counts = self.counts
        for index, count in enumerate(other.counts):
            if count:
                counts[index] += count
        self.total += other.total
        self.sum_us += other.sum_us
        self.max_us = max(self.max_us, other.max_us)

    def merge_sparse(self, sparse: Mapping[int, int], total: int, sum_us: int, max_us: int) -> None:
        counts = self.counts
        for index, count in sparse.items():
            counts[index] += count
        self.total += total
        self.sum_us += sum_us
        self.max_us = max(self.max_us, max_us)

    def sparse(self) -> dict[int, int]:
        return {index: count for index, count in enumerate(self.counts) if count}

    @property
    def mean_us(self) -> float:
        return self.sum_us / self.total if self.total else 0.0

    def percentile(self, fraction: float) -> float:
        """The value at ``fraction`` (0..1): the midpoint of its bucket, capped by the maximum."""
        if not self.total:
            return 0.0
        if fraction >= 1.0:
            return float(self.max_us)
        rank = max(1, int(fraction * self.total + 0.999999))
        seen = 0
        for index, count in enumerate(self.counts):
            if not count:
                continue
            seen += count
            if seen >= rank:
                low, high = bucket_bounds(index)
                if high - low == 1:
                    return float(min(low, self.max_us))
                return min((low + high) / 2, float(self.max_us))
        return float(self.max_us)
