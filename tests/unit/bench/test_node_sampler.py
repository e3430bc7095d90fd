"""NodeSampler: CPU deltas over processes that come and go."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from xmq.bench.node_sampler import NodeSampler
from xmq.bench.survivability_result import IntervalRecord, SurvivabilityResult


def _burn() -> None:
    total = 0
    for i in range(2_000_000):
        total += i


def test_counts_the_cpu_of_live_processes() -> None:
    sampler = NodeSampler([os.getpid()])
    _burn()
    usage = sampler.sample()
    assert usage.broker_cpu_pct > 0
    assert usage.broker_rss_bytes > 1_000_000
    assert usage.redis_cpu_pct is None and usage.redis_ops is None
    sampler.close()


@pytest.mark.integration  # a real child process, killed, and its /proc entry gone
def test_a_killed_process_stops_counting_and_an_added_one_starts() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sampler = NodeSampler([child.pid, 1 << 22])  # the second PID does not exist
        assert list(sampler.pids) == [child.pid]
        child.kill()
        child.wait()
        usage = sampler.sample()
        assert usage.broker_cpu_pct == 0.0 and usage.broker_rss_bytes == 0
        assert not sampler.pids
        sampler.add(os.getpid())
        _burn()
        assert sampler.sample().broker_cpu_pct > 0
    finally:
        child.kill()
        child.wait()


def test_usage_stats_summarise_the_intervals() -> None:
    result = SurvivabilityResult()
    assert result.usage_stats() == {}
    result.intervals = [
        IntervalRecord(1.0, 1, 1, 0, 2, 0, 1.0, 1.0, 40.0, 50.0, 5.0, 100.0),
        IntervalRecord(2.0, 1, 1, 0, 2, 0, 1.0, 1.0, 80.0, 60.0, 7.0, 300.0),
    ]
    stats = result.usage_stats()
    assert stats["broker_cpu_pct_mean"] == 60.0
    assert stats["broker_cpu_pct_peak"] == 80.0
    assert stats["broker_rss_mb_max"] == 60.0
    assert stats["redis_cpu_pct_mean"] == 6.0
    assert stats["redis_ops_mean"] == 200.0
