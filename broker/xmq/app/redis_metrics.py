"""``/metrics`` of a node's Redis connection and held acknowledgements (cluster nodes only).

Read at scrape time from the batcher's :class:`~xmq.store.redis_errors.RedisStats` and the
core's ``AckGate``; nothing here runs per command.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from xmq.core.broker import Broker
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.redis_errors import ROUND_TRIP_BOUNDS


class RedisCollector(Collector):
    def __init__(self, batcher: RedisBatcher, broker: Broker) -> None:
        self.batcher = batcher
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        batcher = self.batcher
        stats = batcher.stats
        errors = CounterMetricFamily(
            "xmq_redis_errors",
            "Redis failures by kind (connection_lost, connection_refused, timeout, loading, "
            "busy, tryagain, masterdown, readonly, noscript, wait_short, ...).",
            labels=["kind"],
        )
        for kind, count in sorted(stats.errors.items()):
            errors.add_metric([kind], count)
        yield errors
        retries = CounterMetricFamily(
            "xmq_redis_retries",
            "Redis commands sent again after a transient failure, by the failure's kind.",
            labels=["kind"],
        )
        for kind, count in sorted(stats.retries.items()):
            retries.add_metric([kind], count)
        yield retries
        yield CounterMetricFamily(
            "xmq_redis_writes_given_up",
            "Durable writes given up (a final error, or still failing after "
            "persistence.write_retry_s): their publishers got an error, never a success.",
            value=stats.given_up,
        )
        yield CounterMetricFamily(
            "xmq_redis_master_changes",
            "Times the batcher reconnected to another Redis address (a Sentinel failover).",
            value=stats.master_changes,
        )
        depth = GaugeMetricFamily(
            "xmq_redis_batcher_commands",
            "Commands in the Redis batcher: queued for the next pipeline, in flight (sent, "
            "waiting for the reply), retrying (waiting for their backoff).",
            labels=["state"],
        )
        depth.add_metric(["queued"], batcher.queued)
        depth.add_metric(["inflight"], batcher.inflight)
        depth.add_metric(["retrying"], batcher.retrying)
        yield depth
        yield CounterMetricFamily(
            "xmq_redis_pipelines", "Pipelines sent by the batcher.", value=batcher.pipelines
        )
        yield CounterMetricFamily(
            "xmq_redis_commands", "Commands sent by the batcher.", value=batcher.commands
        )
        buckets: list[tuple[str, float]] = []
        cumulative = 0
        for bound, count in zip(ROUND_TRIP_BOUNDS, stats.rtt_counts, strict=False):
            cumulative += count
            buckets.append((repr(bound), cumulative))
        buckets.append(("+Inf", stats.rtt_count))
        rtt = HistogramMetricFamily(
            "xmq_redis_round_trip_seconds",
            "Time from a pipeline's write to its last reply (WAIT included), measured on one "
            f"pipeline in {batcher.rtt_every} (a sample: the count is of the measured "
            "pipelines; xmq_redis_pipelines counts every one).",
        )
        rtt.add_metric([], buckets, stats.rtt_total)
        yield rtt
        acks = self.broker.acks  # set when the node joins, with max_queued_writes 0
        if acks is not None:
            yield GaugeMetricFamily(
                "xmq_held_acks",
                "Publishers' PUBACK / PUBREC / PUBCOMP held until their records are written.",
                value=acks.held,
            )
            yield CounterMetricFamily(
                "xmq_held_acks_refused",
                "Held acknowledgements sent as an error (or the connection closed) because a "
                "record was not written.",
                value=acks.failed,
            )
