"""The Prometheus collector reads the core's counters at scrape time."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from xmq.codec.reason_codes import ReasonCode
from xmq.core.broker import Broker
from xmq.core.settings import CoreSettings
from xmq.observability.broker_metrics import (
    BrokerCollector,
    LabelledSource,
    build_registry,
    reason_name,
)


def _scrape(collector: BrokerCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(build_registry(collector)).decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_counters_are_read_when_scraped() -> None:
    broker = Broker(CoreSettings())
    collector = BrokerCollector(broker, lambda: 0.25, [])
    before = _scrape(collector)
    assert before[("xmq_messages_received_total", ())] == 0
    broker.stats.messages_received += 7
    broker.stats.bytes_sent += 1000
    broker.stats.clients_connected = 3
    after = _scrape(collector)
    assert after[("xmq_messages_received_total", ())] == 7
    assert after[("xmq_bytes_sent_total", ())] == 1000
    assert after[("xmq_clients_connected", ())] == 3
    assert after[("xmq_event_loop_lag_seconds", ())] == 0.25
    assert ("process_cpu_seconds_total", ()) in after


def test_refusals_are_labelled_by_reason_and_auth_failures_summed() -> None:
    broker = Broker(CoreSettings())
    refused = broker.stats.refused_by_reason
    refused[ReasonCode.QUOTA_EXCEEDED] = 2
    refused[ReasonCode.BAD_USER_NAME_OR_PASSWORD] = 3
    refused[ReasonCode.NOT_AUTHORIZED] = 1
    samples = _scrape(BrokerCollector(broker, lambda: 0.0, []))
    assert samples[("xmq_connects_refused_total", (("reason", "quota_exceeded"),))] == 2
    assert samples[("xmq_connects_refused_total", (("reason", "not_authorized"),))] == 1
    assert samples[("xmq_auth_failures_total", ())] == 4


def test_labelled_sources_are_read_per_scrape() -> None:
    values = {"mqtt": 1.0}
    source = LabelledSource("xmq_test_open", "test", "listener", lambda: dict(values))
    counter = LabelledSource("xmq_test_events", "test", "listener", lambda: values, "counter")
    collector = BrokerCollector(Broker(CoreSettings()), lambda: 0.0, [source, counter])
    assert _scrape(collector)[("xmq_test_open", (("listener", "mqtt"),))] == 1
    values["mqtt"] = 5
    values["tls"] = 2
    samples = _scrape(collector)
    assert samples[("xmq_test_open", (("listener", "mqtt"),))] == 5
    assert samples[("xmq_test_events_total", (("listener", "tls"),))] == 2


def test_reason_names() -> None:
    assert reason_name(0x9F) == "connection_rate_exceeded"
    assert reason_name(0x86) == "bad_user_name_or_password"
    assert reason_name(0x7E) == "0x7e"


def test_messages_by_qos_and_drops_by_reason() -> None:
    broker = Broker(CoreSettings())
    stats = broker.stats
    for _ in range(5):
        stats.count_received(1, 0)
    for _ in range(4):
        stats.count_sent(2, 16)
    stats.drop("queue_full")
    stats.drop("queue_full")
    stats.drop("memory_budget")
    samples = _scrape(BrokerCollector(broker, lambda: 0.0, []))
    assert samples[("xmq_publish_packets_total", (("direction", "in"), ("qos", "1")))] == 5
    assert samples[("xmq_publish_packets_total", (("direction", "out"), ("qos", "2")))] == 4
    out_bytes = (("direction", "out"), ("qos", "2"))
    assert samples[("xmq_publish_payload_bytes_total", out_bytes)] == 64
    assert samples[("xmq_messages_dropped_by_reason_total", (("reason", "queue_full"),))] == 2
    assert samples[("xmq_messages_dropped_by_reason_total", (("reason", "memory_budget"),))] == 1
    assert samples[("xmq_messages_dropped_total", ())] == 3


def test_subscribe_refusals_and_routing_histogram() -> None:
    broker = Broker(CoreSettings())
    stats = broker.stats
    stats.subscribe_refused_by_reason[ReasonCode.NOT_AUTHORIZED] = 3
    stats.route_seconds.observe(0.00002)
    stats.route_seconds.observe(0.003)
    stats.route_seconds.observe(9.0)
    samples = _scrape(BrokerCollector(broker, lambda: 0.0, []))
    assert samples[("xmq_subscriptions_refused_total", (("reason", "not_authorized"),))] == 3
    assert samples[("xmq_route_seconds_bucket", (("le", "2.5e-05"),))] == 1
    assert samples[("xmq_route_seconds_bucket", (("le", "0.005"),))] == 2
    assert samples[("xmq_route_seconds_bucket", (("le", "+Inf"),))] == 3
    assert samples[("xmq_route_seconds_count", ())] == 3
