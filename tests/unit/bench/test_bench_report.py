"""Summaries, tables, JSON lines and charts from synthetic worker reports and broker samples."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from xmq.bench.accounting import DeliveryAccount
from xmq.bench.broker_probe import ProbeSample
from xmq.bench.charts import write_charts
from xmq.bench.histogram import bucket_index
from xmq.bench.plan import IntervalReport
from xmq.bench.report import ratios, render_table, write_json_lines
from xmq.bench.results import (
    IntervalAggregator,
    RunResult,
    client_flags,
    flat_or_climbing,
    summarize_connections,
    summarize_messages,
)
from xmq.bench.scenarios import CONNECTIONS, MESSAGES
from xmq.bench.steps import classify_connect_ladder, highest_flat


def _report(
    index: int,
    delivered: int,
    latency_us: int,
    *,
    worker: int = 0,
    cpu_s: float = 0.2,
    lag_us: int = 0,
) -> IntervalReport:
    return IntervalReport(
        worker_index=worker,
        index=index,
        sent=delivered,
        delivered=delivered,
        duplicates=0,
        hist={bucket_index(latency_us): delivered} if delivered else {},
        lat_total=delivered,
        lat_sum_us=latency_us * delivered,
        lat_max_us=latency_us if delivered else 0,
        send_lag_max_us=lag_us,
        held_back=0,
        cpu_s=cpu_s,
        connections=10,
        connection_losses=0,
    )


def _aggregate(
    latencies: list[int], rate: int, *, broker_cpu_per_s: float = 0.5, workers: int = 1
) -> IntervalAggregator:
    aggregator = IntervalAggregator(1.0, workers)
    for boundary in range(len(latencies) + 1):
        rss = 10_000_000 + boundary * 1_000_000
        aggregator.add_sample(boundary, ProbeSample((boundary * broker_cpu_per_s,), (rss,)))
    for index, latency in enumerate(latencies):
        for worker in range(workers):
            aggregator.add_report(_report(index, rate // workers, latency, worker=worker))
    return aggregator


def test_messages_summary_of_a_steady_run() -> None:
    aggregator = _aggregate([500] * 10, 10_000, workers=2)
    points, summary = summarize_messages(
        aggregator, offered_rate=10_000, warmup_s=2.0, publish_duration_s=10.0
    )
    assert len(points) == 10
    assert summary.sustained_rate == pytest.approx(10_000)
    assert summary.window_s == 8.0
    assert summary.lat_avg_us == pytest.approx(500)
    assert summary.lat_p99_us == pytest.approx(500, rel=0.07)
    assert summary.median_interval_avg_us == pytest.approx(500)
    assert summary.broker_cpu_pct_mean == pytest.approx(50.0)
    # 0.5 CPU-s per second over 10,000 deliveries per second: 50 µs per delivery
    assert summary.broker_cpu_per_1k_s == pytest.approx(0.05)
    assert summary.rss_max == 20_000_000
    assert summary.verdict == "flat"
    assert points[3].client_cpu_pct == pytest.approx(40.0)
    assert points[3].client_cpu_max_pct == pytest.approx(20.0)
    assert summary.client_cpu_pct_mean == pytest.approx(40.0)
    # two workers x 0.2 CPU-s per second over 10,000 deliveries per second: 40 µs each
    assert summary.client_cpu_per_1k_s == pytest.approx(0.04)


def test_climbing_latency_and_missed_rate_are_called_out() -> None:
    climbing = _aggregate([1000 * 2**n for n in range(9)], 10_000)
    _, summary = summarize_messages(
        climbing, offered_rate=10_000, warmup_s=0, publish_duration_s=9.0
    )
    assert summary.verdict == "climbing"
    short = _aggregate([500] * 6, 8_000)
    _, summary = summarize_messages(short, offered_rate=10_000, warmup_s=0, publish_duration_s=6.0)
    assert summary.verdict == "saturated"


@pytest.mark.parametrize(
    ("averages", "verdict"),
    [
        ([100.0] * 9, "flat"),
        ([100.0, 120, 90, 100, 140, 100, 110, 90, 130], "flat"),
        ([100.0, 200, 400, 800, 1600, 3200, 6400, 12800, 25600], "climbing"),
        ([1000.0, 1100, 1200, 1300, 1400, 1500, 1600, 1700, 1800], "flat"),
        ([1.0], "flat"),
    ],
    ids=["constant", "noisy", "doubling", "slow-drift", "too-short"],
)
def test_flat_or_climbing(averages: list[float], verdict: str) -> None:
    assert flat_or_climbing(averages) == verdict


def test_connections_summary_gives_rss_per_connection() -> None:
    aggregator = IntervalAggregator(1.0, 1)
    for boundary in range(6):
        rss = 10_000_000 + min(boundary, 4) * 1_000_000
        aggregator.add_sample(boundary, ProbeSample((0.1 * boundary,), (rss,)))
    for index in range(4):
        aggregator.add_report(_report(index, 1000, 300))
    aggregator.add_report(_report(4, 0, 0))
    _, summary = summarize_connections(
        aggregator, target_rate=1000, clients=4000, connect_duration_s=4.0
    )
    assert summary.delivered == 4000
    assert summary.sustained_rate == pytest.approx(1000)
    assert summary.rss_per_connection == pytest.approx(1000)
    assert summary.verdict == "held"


def _result(label: str, rate: float, p99: float, cpu_1k: float, kind: str = MESSAGES) -> RunResult:
    aggregator = _aggregate([int(p99)] * 5, int(rate))
    points, summary = summarize_messages(
        aggregator, offered_rate=rate, warmup_s=1, publish_duration_s=5
    )
    summary.broker_cpu_per_1k_s = cpu_1k
    return RunResult(
        label=label,
        scenario="fanout",
        kind=kind,
        description="5 publishers, 1000 subscribers",
        params={"rate": rate},
        intervals=points,
        summary=summary,
        account=DeliveryAccount(expected=100, received=100),
        flags=[],
    )


def test_side_by_side_table_has_ratios() -> None:
    xmq = _result("xmq", 20_000, 2000, 0.012)
    mosquitto = _result("mosquitto", 20_000, 1000, 0.015)
    table = render_table([xmq, mosquitto])
    assert "xmq/mosquitto" in table
    p99_line = next(line for line in table.splitlines() if line.startswith("latency p99"))
    assert "2.00x" in p99_line
    cpu_line = next(line for line in table.splitlines() if "CPU per delivery" in line)
    assert "12.0 µs" in cpu_line and "15.0 µs" in cpu_line and "0.80x" in cpu_line
    got = ratios(xmq, mosquitto)
    assert got["throughput"] == pytest.approx(1.0)
    assert got["p99"] == pytest.approx(2.0)
    assert got["cpu_per_delivery"] == pytest.approx(0.8)
    assert got["rss_per_connection"] is None


def test_json_lines_carry_intervals_summaries_and_ratios() -> None:
    stream = io.StringIO()
    write_json_lines(
        [_result("xmq", 1000, 500, 0.01), _result("mosquitto", 1000, 500, 0.01)], stream
    )
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    kinds = [r["type"] for r in records]
    assert kinds.count("interval") == 10
    assert kinds.count("summary") == 2
    assert kinds[-1] == "compare"
    summary = next(r for r in records if r["type"] == "summary")
    assert summary["summary"]["sustained_rate"] == pytest.approx(1000)
    assert summary["account"]["lost"] == 0


def test_flags_name_a_client_bound_run() -> None:
    result = _result("xmq", 1000, 500, 0.01)
    result.summary.client_cpu_pct_max = 97
    result.summary.send_lag_max_us = 80_000
    flags = client_flags(result.summary, result.intervals)
    assert any(f.startswith("client-bound") for f in flags)
    assert any(f.startswith("client-late") for f in flags)
    assert client_flags(_result("x", 1000, 500, 0.01).summary, []) == []


def test_ladders() -> None:
    steps = [_result("m", rate, p99, 0.01, CONNECTIONS) for rate, p99 in [(1e3, 500), (2e3, 600)]]
    steps.append(_result("m", 4e3, 5000, 0.01, CONNECTIONS))
    steps.append(_result("m", 8e3, 9000, 0.01, CONNECTIONS))
    steps[3].summary.sustained_rate = 5000
    assert classify_connect_ladder(steps) == ["held", "held", "knee", "saturated"]
    fanout_steps = [_result("m", r, 500, 0.01) for r in (1e4, 2e4, 3e4)]
    fanout_steps[2].summary.verdict = "climbing"
    best = highest_flat(fanout_steps)
    assert best is not None and best.summary.offered_rate == 2e4


def test_charts_are_png_files(tmp_path: Path) -> None:
    runs = [[_result("xmq", 1000, 500, 0.01), _result("mosquitto", 1000, 800, 0.01)]]
    (path,) = write_charts(runs, tmp_path)
    assert path.name == "fanout-1000-xmq-vs-mosquitto.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_late_report_is_divided_by_the_time_it_covers() -> None:
    aggregator = IntervalAggregator(1.0, 1)
    late = _report(0, 1000, 500, cpu_s=1.8)
    late.wall_s = 2.0  # the saturated worker's timer fired a second late
    aggregator.add_report(late)
    (point,) = aggregator.points()
    assert point.client_cpu_max_pct == pytest.approx(90.0)
