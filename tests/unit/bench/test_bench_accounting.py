"""Loss, duplicate and order detection on synthetic sequences, and the latency histogram."""

from __future__ import annotations

import pytest

from xmq.bench.accounting import (
    SeqTracker,
    TrackerSnapshot,
    account,
    merge_snapshots,
)
from xmq.bench.histogram import (
    BUCKETS,
    LatencyHistogram,
    bucket_bounds,
    bucket_index,
)


def _tracker(seqs: list[int]) -> SeqTracker:
    tracker = SeqTracker()
    for seq in seqs:
        tracker.record(seq)
    return tracker


@pytest.mark.parametrize(
    ("seqs", "unique", "duplicates", "out_of_order"),
    [
        (list(range(10)), 10, 0, 0),
        ([0, 1, 1, 2, 2, 2], 3, 3, 0),
        ([0, 2, 1, 3], 4, 0, 1),
        ([5, 4, 3, 2, 1, 0], 6, 0, 5),
        ([0, 1000, 999, 1000], 3, 1, 1),
        ([], 0, 0, 0),
    ],
    ids=["in-order", "duplicates", "one-swap", "reversed", "sparse-growth", "nothing"],
)
def test_tracker_counts(seqs: list[int], unique: int, duplicates: int, out_of_order: int) -> None:
    tracker = _tracker(seqs)
    assert (tracker.unique, tracker.duplicates, tracker.out_of_order) == (
        unique,
        duplicates,
        out_of_order,
    )


def test_record_reports_first_arrival_only() -> None:
    tracker = SeqTracker()
    assert tracker.record(70_000)
    assert not tracker.record(70_000)


def test_account_finds_missing_messages_per_pair() -> None:
    snapshots = {
        (0, 1): [TrackerSnapshot.of(_tracker([0, 1, 2, 3, 4]))],
        (1, 1): [TrackerSnapshot.of(_tracker([0, 2, 4]))],  # lost 1 and 3
    }
    result = account({0: [1], 1: [1]}, {1: 5}, snapshots)
    assert result.expected == 10
    assert result.received == 8
    assert result.lost == 2
    assert result.pairs == 2
    assert result.pairs_with_loss == 1
    assert result.loss_ratio == pytest.approx(0.2)


def test_account_counts_a_silent_publisher_as_lost() -> None:
    result = account({0: [1, 2]}, {1: 3, 2: 4}, {(0, 1): [TrackerSnapshot.of(_tracker([0, 1, 2]))]})
    assert result.lost == 4
    assert result.received == 3


def test_account_reports_unexpected_deliveries() -> None:
    received = {
        (0, 1): [TrackerSnapshot.of(_tracker([0, 1, 7]))],  # 7 was never sent
        (5, 1): [TrackerSnapshot.of(_tracker([0]))],  # receiver 5 subscribed to nothing
    }
    result = account({0: [1]}, {1: 2}, received)
    assert result.lost == 0
    assert result.unexpected == 2


def test_shared_group_merge_finds_cross_process_duplicates() -> None:
    first = TrackerSnapshot.of(_tracker([0, 2, 4, 6]))
    second = TrackerSnapshot.of(_tracker([1, 3, 4, 5, 7, 9]))
    merged = merge_snapshots([first, second])
    assert merged.unique == 9
    assert merged.duplicates == 1  # 4 arrived in both processes
    result = account({0: [1]}, {1: 10}, {(0, 1): [first, second]})
    assert result.lost == 1  # 8
    assert result.duplicates == 1


def test_tracker_duplicates_within_a_process_survive_merge() -> None:
    part = TrackerSnapshot.of(_tracker([0, 0, 1]))
    assert merge_snapshots([part]).duplicates == 1


@pytest.mark.parametrize(
    "value",
    [0, 1, 31, 32, 33, 47, 63, 64, 100, 1000, 123_456, 10**9],
    ids=lambda v: f"v{v}",
)
def test_bucket_contains_its_value_within_one_sixteenth(value: int) -> None:
    low, high = bucket_bounds(bucket_index(value))
    assert low <= value < high
    assert high - low <= max(1, low // 16)


def test_buckets_are_contiguous() -> None:
    for index in range(1, 300):
        assert bucket_bounds(index)[0] == bucket_bounds(index - 1)[1]


def test_negative_and_huge_values_stay_in_range() -> None:
    assert bucket_index(-5) == 0
    assert bucket_index(1 << 62) == BUCKETS - 1


def test_percentiles_of_a_uniform_distribution() -> None:
    histogram = LatencyHistogram()
    histogram.record_many(range(1, 10_001))
    assert histogram.total == 10_000
    assert histogram.mean_us == pytest.approx(5000.5)
    assert histogram.percentile(0.5) == pytest.approx(5000, rel=0.07)
    assert histogram.percentile(0.99) == pytest.approx(9900, rel=0.07)
    assert histogram.percentile(1.0) == 10_000
    assert histogram.max_us == 10_000


def test_merge_equals_recording_everything_once() -> None:
    left, right, both = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    left.record_many([5, 50, 500])
    right.record_many([5000, 50_000])
    both.record_many([5, 50, 500, 5000, 50_000])
    left.merge(right)
    assert left.counts == both.counts
    assert (left.total, left.sum_us, left.max_us) == (both.total, both.sum_us, both.max_us)
    sparse = LatencyHistogram()
    sparse.merge_sparse(both.sparse(), both.total, both.sum_us, both.max_us)
    assert sparse.percentile(0.9) == both.percentile(0.9)


def test_empty_histogram_percentile_is_zero() -> None:
    assert LatencyHistogram().percentile(0.99) == 0.0
