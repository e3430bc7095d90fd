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

from xmq.codec.reason_codes import ReasonCode
from xmq.core.broker import Broker

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
    label: str
    read: Callable[[], Mapping[str, float]]
    kind: Literal["gauge", "counter"] = "gauge"

    def family(self) -> Metric:
        metric: Metric
        if self.kind == "counter":
            metric = CounterMetricFamily(self.name, self.documentation, labels=[self.label])
        else:
            metric = GaugeMetricFamily(self.name, self.documentation, labels=[self.label])
        for value, sample in sorted(self.read().items()):
            metric.add_metric([value], sample)
        return metric


class BrokerCollector(Collector):
    """Collects the node's metrics from ``Broker`` state when scraped."""

    def __init__(
        self, broker: Broker, loop_lag: Callable[[], float], sources: list[LabelledSource]
    ) -> None:
        self.broker = broker
        self.loop_lag = loop_lag
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        stats = broker.stats
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
        route = stats.route_seconds
        buckets: list[tuple[str, float]] = []
        cumulative = 0
        for bound, count in zip(route.bounds, route.counts, strict=False):
            cumulative += count
            buckets.append((repr(bound), cumulative))
        buckets.append(("+Inf", route.count))
        routing = HistogramMetricFamily(
            "xmq_route_seconds",
            "Time from a PUBLISH read to its bytes queued for every matching subscriber "
            "(sampled: one PUBLISH in 16).",
        )
        routing.add_metric([], buckets, route.total)
        yield routing
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
        yield _gauge("xmq_queued_bytes", "Payload bytes queued in sessions.", stats.queued_bytes)
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
        for source in self.sources:
            yield source.family()


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def build_registry(collector: BrokerCollector) -> CollectorRegistry:
    """A registry private to this node: the broker's metrics plus process CPU/memory."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    ProcessCollector(registry=registry)
    return registry
