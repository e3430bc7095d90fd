"""Per-interval series and the run summary, built from worker reports and broker samples."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from xmq.bench.accounting import DeliveryAccount
from xmq.bench.broker_probe import ProbeSample
from xmq.bench.histogram import LatencyHistogram
from xmq.bench.plan import IntervalReport
from xmq.bench.redis_probe import RedisSample

CLIENT_BOUND_CPU_PCT = 90.0
CLIENT_BOUND_LAG_US = 50_000
SATURATION_RATIO = 0.97


@dataclass(slots=True)
class IntervalPoint:
    index: int
    t_s: float
    sent: int = 0
    delivered: int = 0
    duplicates: int = 0
    lat_avg_us: float = 0.0
    lat_p50_us: float = 0.0
    lat_p99_us: float = 0.0
    lat_max_us: float = 0.0
    broker_cpu_pct: float = 0.0
    broker_rss: int = 0
    broker_rss_by_pid: list[int] = field(default_factory=list)
    client_cpu_pct: float = 0.0
    client_cpu_max_pct: float = 0.0
    send_lag_max_us: int = 0
    held_back: int = 0
    connections: int = 0
    connection_losses: int = 0
    broker_cpu_pct_by_pid: list[float] = field(default_factory=list)
    redis_cpu_pct: float = 0.0
    redis_ops: float = 0.0


@dataclass(slots=True)
class Summary:
    offered_rate: float = 0.0
    sustained_rate: float = 0.0
    delivered: int = 0
    window_s: float = 0.0
    lat_avg_us: float = 0.0
    lat_p50_us: float = 0.0
    lat_p90_us: float = 0.0
    lat_p99_us: float = 0.0
    lat_max_us: float = 0.0
    median_interval_avg_us: float = 0.0
    broker_cpu_s: float = 0.0
    broker_cpu_per_1k_s: float = 0.0
    broker_kernel_share: float = 0.0
    """Fraction of the broker's CPU spent in the kernel (system time)."""
    broker_cpu_pct_mean: float = 0.0
    broker_cpu_pct_peak: float = 0.0
    rss_avg: float = 0.0
    rss_median: float = 0.0
    rss_max: int = 0
    rss_baseline: int = 0
    rss_per_connection: float = 0.0
    client_cpu_pct_max: float = 0.0
    """The busiest worker in the busiest interval (% of one core)."""
    client_cpu_pct_mean: float = 0.0
    """All workers together, averaged over the window (% of one core)."""
    client_cpu_per_1k_s: float = 0.0
    send_lag_max_us: int = 0
    redis_cpu_pct_mean: float = 0.0
    redis_ops_mean: float = 0.0
    verdict: str = ""


@dataclass(slots=True)
class RunResult:
    label: str
    scenario: str
    kind: str
    description: str
    params: dict[str, object]
    intervals: list[IntervalPoint]
    summary: Summary
    account: DeliveryAccount | None = None
    setup_connected: int = 0
    setup_failed: int = 0
    setup_error: str = ""
    flags: list[str] = field(default_factory=list)
    broker_pids: list[int] = field(default_factory=list)
    version: str = ""
    redis_commands: dict[str, int] = field(default_factory=dict)


class IntervalAggregator:
    """Merges the workers' interval reports and the broker samples taken at the boundaries."""

    def __init__(self, interval_s: float, workers: int) -> None:
        self.interval_s = interval_s
        self.workers = workers
        self.reports: dict[int, list[IntervalReport]] = {}
        self.samples: dict[int, ProbeSample] = {}
        """Broker sample at boundary k (t0 + k * interval)."""
        self.redis: dict[int, RedisSample] = {}
        self.last_index: int | None = None
        """Once set (the run stopped), later partial reports fold into this interval."""

    def add_report(self, report: IntervalReport) -> None:
        if self.last_index is not None and report.index > self.last_index:
            report.index = self.last_index
        self.reports.setdefault(report.index, []).append(report)

    def complete_interval(self, workers: int) -> int:
        """The last interval with every worker's report and the closing broker sample (-1)."""
        done = [
            index
            for index, parts in self.reports.items()
            if len(parts) >= workers and index + 1 in self.samples
        ]
        return max(done, default=-1)

    def add_sample(self, boundary: int, sample: ProbeSample) -> None:
        self.samples[boundary] = sample

    def delivered_total(self) -> int:
        return sum(r.delivered for parts in self.reports.values() for r in parts)

    def sent_total(self) -> int:
        return sum(r.sent for parts in self.reports.values() for r in parts)

    def histogram(self, first: int = 0, last: int | None = None) -> LatencyHistogram:
        merged = LatencyHistogram()
        for index, parts in self.reports.items():
            if index < first or (last is not None and index > last):
                continue
            for report in parts:
                merged.merge_sparse(
                    report.hist, report.lat_total, report.lat_sum_us, report.lat_max_us
                )
        return merged

    def points(self) -> list[IntervalPoint]:
        points: list[IntervalPoint] = []
        for index in sorted(self.reports):
            parts = self.reports[index]
            hist = self.histogram(index, index)
            point = IntervalPoint(index=index, t_s=(index + 1) * self.interval_s)
            point.sent = sum(r.sent for r in parts)
            point.delivered = sum(r.delivered for r in parts)
            point.duplicates = sum(r.duplicates for r in parts)
            point.lat_avg_us = hist.mean_us
            point.lat_p50_us = hist.percentile(0.50)
            point.lat_p99_us = hist.percentile(0.99)
            point.lat_max_us = float(hist.max_us)
            cpu_by_worker: dict[int, float] = {}
            wall_by_worker: dict[int, float] = {}
            live_by_worker: dict[int, int] = {}
            for r in parts:  # a worker's final partial report may share the last interval
                worker = r.worker_index
                cpu_by_worker[worker] = cpu_by_worker.get(worker, 0.0) + r.cpu_s
                wall_by_worker[worker] = wall_by_worker.get(worker, 0.0) + r.wall_s
                live_by_worker[worker] = r.connections
            # CPU over the wall time each report covers (a saturated worker reports late)
            shares = [
                cpu / max(wall_by_worker[worker], self.interval_s)
                for worker, cpu in cpu_by_worker.items()
            ]
            point.client_cpu_pct = 100.0 * sum(shares)
            point.client_cpu_max_pct = 100.0 * max(shares)
            point.send_lag_max_us = max(r.send_lag_max_us for r in parts)
            point.held_back = sum(r.held_back for r in parts)
            point.connections = sum(live_by_worker.values())
            point.connection_losses = sum(r.connection_losses for r in parts)
            start, end = self.samples.get(index), self.samples.get(index + 1)
            if start is not None and end is not None:
                point.broker_cpu_pct = (
                    100.0 * (end.total_cpu_s - start.total_cpu_s) / self.interval_s
                )
                point.broker_cpu_pct_by_pid = [
                    100.0 * (b - a) / self.interval_s
                    for a, b in zip(start.cpu_s, end.cpu_s, strict=True)
                ]
            redis_start, redis_end = self.redis.get(index), self.redis.get(index + 1)
            if redis_start is not None and redis_end is not None:
                point.redis_cpu_pct = (
                    100.0 * (redis_end.cpu_s - redis_start.cpu_s) / self.interval_s
                )
                point.redis_ops = (redis_end.commands - redis_start.commands) / self.interval_s
            if end is not None:
                point.broker_rss = end.total_rss
                point.broker_rss_by_pid = list(end.rss)
            points.append(point)
        return points


def flat_or_climbing(interval_averages: Sequence[float]) -> str:
    """``climbing`` when the last third's median latency is well above the first third's."""
    values = [v for v in interval_averages if v > 0]
    if len(values) < 3:
        return "flat"
    third = max(1, len(values) // 3)
    first = statistics.median(values[:third])
    last = statistics.median(values[-third:])
    return "climbing" if last > 2 * first and last - first > 2_000 else "flat"


def summarize_messages(
    aggregator: IntervalAggregator,
    *,
    offered_rate: float,
    warmup_s: float,
    publish_duration_s: float,
) -> tuple[list[IntervalPoint], Summary]:
    points = aggregator.points()
    interval = aggregator.interval_s
    first = int(round(warmup_s / interval))
    publish_end = max(first + 1, int(publish_duration_s / interval))
    in_rate = [p for p in points if first <= p.index < publish_end]
    in_window = [p for p in points if p.index >= first]
    hist = aggregator.histogram(first)
    summary = Summary(offered_rate=offered_rate)
    summary.window_s = len(in_rate) * interval
    if in_rate:
        summary.sustained_rate = sum(p.delivered for p in in_rate) / summary.window_s
    summary.delivered = aggregator.delivered_total()
    summary.lat_avg_us = hist.mean_us
    summary.lat_p50_us = hist.percentile(0.50)
    summary.lat_p90_us = hist.percentile(0.90)
    summary.lat_p99_us = hist.percentile(0.99)
    summary.lat_max_us = float(hist.max_us)
    averages = [p.lat_avg_us for p in in_rate if p.delivered]
    summary.median_interval_avg_us = statistics.median(averages) if averages else 0.0
    _broker_figures(summary, aggregator, in_window, first)
    window_delivered = sum(p.delivered for p in in_window)
    if window_delivered:
        summary.broker_cpu_per_1k_s = 1000.0 * summary.broker_cpu_s / window_delivered
    # the client's peak while publishing (a drain that empties a backlog at full speed says
    # nothing about whether the client could offer the rate)
    summary.client_cpu_pct_max = max((p.client_cpu_max_pct for p in in_rate), default=0.0)
    _client_figures(summary, in_window, aggregator.interval_s)
    summary.send_lag_max_us = max((p.send_lag_max_us for p in in_window), default=0)
    if summary.sustained_rate < SATURATION_RATIO * offered_rate:
        summary.verdict = "saturated"
    else:
        summary.verdict = flat_or_climbing([p.lat_avg_us for p in in_rate])
    return points, summary


def summarize_connections(
    aggregator: IntervalAggregator,
    *,
    target_rate: float,
    clients: int,
    connect_duration_s: float,
    connect_span_s: float = 0.0,
) -> tuple[list[IntervalPoint], Summary]:
    """``connect_span_s``: from t0 to the last CONNACK (0: estimate from the intervals)."""
    points = aggregator.points()
    hist = aggregator.histogram()
    summary = Summary(offered_rate=target_rate)
    connected = aggregator.delivered_total()
    summary.delivered = connected
    active = [p for p in points if p.delivered]
    if active:
        summary.window_s = (active[-1].index - active[0].index + 1) * aggregator.interval_s
        span = connect_span_s or summary.window_s
        summary.sustained_rate = connected / max(span, connect_duration_s)
    summary.lat_avg_us = hist.mean_us
    summary.lat_p50_us = hist.percentile(0.50)
    summary.lat_p90_us = hist.percentile(0.90)
    summary.lat_p99_us = hist.percentile(0.99)
    summary.lat_max_us = float(hist.max_us)
    averages = [p.lat_avg_us for p in active]
    summary.median_interval_avg_us = statistics.median(averages) if averages else 0.0
    _broker_figures(summary, aggregator, points, 0)
    if connected and summary.rss_max:
        final = points[-1].broker_rss if points else 0
        summary.rss_per_connection = max(0.0, (final - summary.rss_baseline) / connected)
    summary.client_cpu_pct_max = max((p.client_cpu_max_pct for p in points), default=0.0)
    _client_figures(summary, points, aggregator.interval_s)
    held = connected >= 0.99 * clients and summary.sustained_rate >= 0.95 * target_rate
    summary.verdict = "held" if held else "saturated"
    return points, summary


def _broker_figures(
    summary: Summary, aggregator: IntervalAggregator, window: list[IntervalPoint], first: int
) -> None:
    baseline = aggregator.samples.get(0)
    summary.rss_baseline = baseline.total_rss if baseline else 0
    if not window:
        return
    last = window[-1].index + 1
    start, end = aggregator.samples.get(first), aggregator.samples.get(last)
    if start is not None and end is not None:
        summary.broker_cpu_s = end.total_cpu_s - start.total_cpu_s
        if summary.broker_cpu_s > 0 and end.sys_s and start.sys_s:
            kernel = end.total_sys_s - start.total_sys_s
            summary.broker_kernel_share = kernel / summary.broker_cpu_s
        span = (last - first) * aggregator.interval_s
        summary.broker_cpu_pct_mean = 100.0 * summary.broker_cpu_s / span if span else 0.0
    summary.broker_cpu_pct_peak = max(p.broker_cpu_pct for p in window)
    with_redis = [p for p in window if p.redis_ops]
    if with_redis:
        summary.redis_cpu_pct_mean = statistics.fmean(p.redis_cpu_pct for p in with_redis)
        summary.redis_ops_mean = statistics.fmean(p.redis_ops for p in with_redis)
    rss = [p.broker_rss for p in window if p.broker_rss]
    if rss:
        summary.rss_avg = statistics.fmean(rss)
        summary.rss_median = statistics.median(rss)
        summary.rss_max = max(rss)


def _client_figures(summary: Summary, window: list[IntervalPoint], interval_s: float) -> None:
    if not window:
        return
    summary.client_cpu_pct_mean = statistics.fmean(p.client_cpu_pct for p in window)
    delivered = sum(p.delivered for p in window)
    if delivered:
        cpu_s = sum(p.client_cpu_pct for p in window) * interval_s / 100.0
        summary.client_cpu_per_1k_s = 1000.0 * cpu_s / delivered


def client_flags(summary: Summary, points: Sequence[IntervalPoint]) -> list[str]:
    """Why this run's figures may describe the load client rather than the broker."""
    flags: list[str] = []
    if summary.client_cpu_pct_max >= CLIENT_BOUND_CPU_PCT:
        flags.append(
            f"client-bound: a worker used {summary.client_cpu_pct_max:.0f}% of a core "
            "(add --workers or lower the rate)"
        )
    if summary.send_lag_max_us >= CLIENT_BOUND_LAG_US:
        flags.append(
            f"client-late: publishing fell {summary.send_lag_max_us / 1000:.0f} ms behind schedule"
        )
    if any(p.held_back for p in points):
        flags.append("held-back: the broker's Receive Maximum delayed some publishes")
    if any(p.connection_losses for p in points):
        flags.append(f"lost-connections: {sum(p.connection_losses for p in points)}")
    return flags
