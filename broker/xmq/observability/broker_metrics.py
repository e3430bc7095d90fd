"""Prometheus metrics of one broker node, read from the core's counters at scrape time.

Nothing here runs per packet: the core bumps plain integers (``BrokerStats``) and this
collector turns them into metric families when ``/metrics`` is scraped. Adapters the
observability layer may not import (listeners, cluster, storage) contribute through
``LabelledSource`` callables that the composition root registers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from xmq import __version__
from xmq.codec.reason_codes import ReasonCode
from xmq.core.broker import Broker
from xmq.core.stats import LatencyHistogram
from xmq.native_build import BUILD
from xmq.observability.readiness import LoopLagMonitor

AUTH_FAILURE_CODES = frozenset(
    {
        ReasonCode.BAD_USER_NAME_OR_PASSWORD,
        ReasonCode.NOT_AUTHORIZED,
        ReasonCode.BAD_AUTHENTICATION_METHOD,
        ReasonCode.BANNED,
    }
)


def reason_name(code: int) -> str:
    """``0x97`` -> ``quota_exceeded`` (the first enum name of the value)."""
    try:
        return ReasonCode(code).name.lower()
    except ValueError:
        return f"0x{code:02x}"


@dataclass(frozen=True, slots=True)
class LabelledSource:
    """A metric family read from an adapter at scrape time: one sample per label value."""

    name: str
    documentation: str
    label: str | tuple[str, ...]
    """One label, or several (then ``read`` is keyed by tuples of their values)."""
    read: Callable[[], Mapping[str, float]] | Callable[[], Mapping[tuple[str, str], float]]
    kind: Literal["gauge", "counter"] = "gauge"

    def family(self) -> Metric:
        metric: Metric
        labels = [self.label] if isinstance(self.label, str) else list(self.label)
        if self.kind == "counter":
            metric = CounterMetricFamily(self.name, self.documentation, labels=labels)
        else:
            metric = GaugeMetricFamily(self.name, self.documentation, labels=labels)
        for value, sample in sorted(self.read().items()):
            metric.add_metric([value] if isinstance(value, str) else list(value), sample)
        return metric


class BrokerCollector(Collector):
    """Collects the node's metrics from ``Broker`` state when scraped."""

    def __init__(
        self,
        broker: Broker,
        loop_lag: Callable[[], float],
        sources: list[LabelledSource],
        lag_monitor: LoopLagMonitor | None = None,
    ) -> None:
        self.broker = broker
        self.loop_lag = loop_lag
        self.sources = sources
        self.lag_monitor = lag_monitor

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        stats = broker.stats
        yield build_info()
        yield _gauge("xmq_clients_connected", "Clients connected now.", stats.clients_connected)
        yield _gauge(
            "xmq_clients_maximum", "Most clients connected at once.", stats.clients_maximum
        )
        yield _counter("xmq_connects", "CONNECT packets received.", stats.connects_total)
        refused = CounterMetricFamily(
            "xmq_connects_refused",
            "Connection attempts refused, by CONNACK reason.",
            labels=["reason"],
        )
        auth_failures = 0
        for code, count in sorted(stats.refused_by_reason.items()):
            refused.add_metric([reason_name(code)], count)
            if code in AUTH_FAILURE_CODES:
                auth_failures += count
        yield refused
        closed = CounterMetricFamily(
            "xmq_disconnects",
            "Connections closed by the server, by DISCONNECT reason (limits, keep alive, ...).",
            labels=["reason"],
        )
        for code, count in sorted(stats.disconnects_by_reason.items()):
            closed.add_metric([reason_name(code)], count)
        yield closed
        yield _counter("xmq_auth_failures", "Refused authentications.", auth_failures)
        yield _counter(
            "xmq_messages_received", "PUBLISH packets received.", stats.messages_received
        )
        yield _counter("xmq_messages_sent", "PUBLISH packets sent.", stats.messages_sent)
        by_qos = CounterMetricFamily(
            "xmq_publish_packets",
            "PUBLISH packets by direction and QoS.",
            labels=["direction", "qos"],
        )
        for qos in range(3):
            by_qos.add_metric(["in", str(qos)], stats.received_by_qos[qos])
            by_qos.add_metric(["out", str(qos)], stats.sent_by_qos[qos])
        yield by_qos
        bytes_by_qos = CounterMetricFamily(
            "xmq_publish_payload_bytes",
            "Payload bytes of PUBLISH packets by direction and QoS.",
            labels=["direction", "qos"],
        )
        for qos in range(3):
            bytes_by_qos.add_metric(["in", str(qos)], stats.received_bytes_by_qos[qos])
            bytes_by_qos.add_metric(["out", str(qos)], stats.sent_bytes_by_qos[qos])
        yield bytes_by_qos
        yield _counter(
            "xmq_messages_dropped",
            "Messages dropped (QoS 0 to slow clients, full queues, oversize).",
            stats.messages_dropped,
        )
        sub_refused = CounterMetricFamily(
            "xmq_subscriptions_refused",
            "Subscriptions refused in SUBACK, by reason.",
            labels=["reason"],
        )
        for code, count in sorted(stats.subscribe_refused_by_reason.items()):
            sub_refused.add_metric([reason_name(code)], count)
        yield sub_refused
        yield _histogram(
            "xmq_route_seconds",
            "Time from a PUBLISH read to its bytes queued for every matching subscriber "
            "(sampled: one PUBLISH in 16).",
            stats.route_seconds,
        )
        dropped = CounterMetricFamily(
            "xmq_messages_dropped_by_reason", "Messages dropped, by reason.", labels=["reason"]
        )
        for reason, count in sorted(stats.dropped_by_reason.items()):
            dropped.add_metric([reason], count)
        yield dropped
        yield _counter(
            "xmq_messages_expired", "Messages expired in queues.", stats.messages_expired
        )
        yield _counter(
            "xmq_publish_denied", "PUBLISH packets refused by ACL.", stats.publish_denied
        )
        yield _counter(
            "xmq_subscriptions_revoked",
            "Subscriptions of resumed sessions removed: the user's rules no longer allow them.",
            stats.subscriptions_revoked,
        )
        yield _counter("xmq_bytes_received", "Bytes read from clients.", stats.bytes_received)
        yield _counter("xmq_bytes_sent", "Bytes written to clients.", stats.bytes_sent)
        yield _gauge(
            "xmq_queued_bytes",
            "Memory of the messages queued in sessions, object overhead included "
            "(limits.memory_budget_bytes).",
            stats.queued_bytes,
        )
        yield _gauge(
            "xmq_memory_budget_bytes",
            "Budget of queued message memory (limits.memory_budget_bytes): a delivery that "
            "would go past it is dropped and counted.",
            broker.settings.queues.budget_bytes,
        )
        queued = inflight = 0
        for session in broker.sessions.values():
            queued += len(session.queue)
            inflight += len(session.inflight)
        yield _gauge("xmq_queued_messages", "Messages queued in sessions.", queued)
        yield _gauge("xmq_inflight_messages", "Outbound QoS 1/2 messages in flight.", inflight)
        yield _gauge("xmq_sessions", "Sessions held (connected or not).", len(broker.sessions))
        yield _gauge("xmq_subscriptions", "Non-shared subscriptions.", len(broker.subscriptions))
        yield _gauge("xmq_retained_messages", "Retained messages.", len(broker.retained))
        yield _gauge(
            "xmq_event_loop_lag_seconds",
            "How late the event loop ran the last periodic probe.",
            self.loop_lag(),
        )
        if self.lag_monitor is not None:
            yield _gauge(
                "xmq_event_loop_lag_max_seconds",
                "The longest event-loop stall of the last 10 seconds (probe every 10 ms).",
                self.lag_monitor.max_lag(),
            )
            yield _gauge(
                "xmq_event_loop_busy_max_seconds",
                "Of the stalls of the last 10 seconds, the most CPU time the event loop's "
                "thread spent between two probes (its own work, not waiting for a CPU).",
                self.lag_monitor.max_busy(),
            )
            yield _histogram(
                "xmq_event_loop_stall_seconds",
                "How late the event loop ran each 10 ms probe.",
                self.lag_monitor.histogram,
            )
        yield _gauge(
            "xmq_persistent_sessions",
            "Sessions held with a session expiry (limits.max_persistent_sessions).",
            broker.persistent_sessions,
        )
        yield _gauge(
            "xmq_retained_bytes",
            "Memory counted for retained messages (limits.max_retained_bytes).",
            broker.retained.bytes,
        )
        yield _counter(
            "xmq_deliveries_routed", "Deliveries planned by routing.", stats.deliveries_routed
        )
        caps = CounterMetricFamily(
            "xmq_cap_refusals",
            "Requests refused at a configured cap (answered 0x97 where the protocol allows).",
            labels=["cap"],
        )
        for cap, count in sorted(stats.caps_hit.items()):
            caps.add_metric([cap], count)
        yield caps
        for source in self.sources:
            yield source.family()


def build_info() -> GaugeMetricFamily:
    """``xmq_build_info{build="compiled"|"pure",version=...} 1``: which hot modules run."""
    info = GaugeMetricFamily(
        "xmq_build_info",
        "The running build: mypyc-compiled hot modules or pure Python (XMQ_PURE=1, not built).",
        labels=["build", "version"],
    )
    info.add_metric([BUILD, __version__], 1)
    return info


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _histogram(name: str, documentation: str, histogram: LatencyHistogram) -> Metric:
    buckets: list[tuple[str, float]] = []
    cumulative = 0
    for bound, count in zip(histogram.bounds, histogram.counts, strict=False):
        cumulative += count
        buckets.append((repr(bound), cumulative))
    buckets.append(("+Inf", histogram.count))
    family = HistogramMetricFamily(name, documentation)
    family.add_metric([], buckets, histogram.total)
    return family


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def build_registry(collector: BrokerCollector) -> CollectorRegistry:
    """A registry private to this node: the broker's metrics plus process CPU/memory."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    ProcessCollector(registry=registry)
    return registry
