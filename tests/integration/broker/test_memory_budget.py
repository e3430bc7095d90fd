"""The memory budget bounds real memory: a queued flood grows the broker's RSS by at most the
budget plus a fixed baseline (issue 13 saw xmq_queued_bytes 48 MB while RSS rose by 700 MB)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.http_probe import metric, wait_port
from tests.support.raw_client import RawClient
from xmq.codec.packets import Disconnect, Puback, Publish, Suback, Subscribe, SubscriptionRequest
from xmq.codec.properties import Properties
from xmq.codec.writer import encode

pytestmark = pytest.mark.integration

BUDGET = 32 * 1024 * 1024
BASELINE = 40 * 1024 * 1024
"""Allocator slack, the flood's buffers and counters: fixed, whatever the flood's length."""
MESSAGES = 200_000
CONFIG = f"""\
limits: {{memory_budget_bytes: {BUDGET}, max_queued_messages: 10000000,
         max_queued_bytes: 4000000000}}
"""


@pytest.fixture
def broker(start_broker: Callable[..., BrokerProcess]) -> BrokerProcess:
    return start_broker(CONFIG)


def _rss(process: BrokerProcess) -> int:
    for line in Path(f"/proc/{process.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_rss_under_a_queued_flood_stays_within_budget_plus_baseline(
    broker: BrokerProcess,
) -> None:
    props = Properties()
    props.session_expiry_interval = 600
    offline = RawClient(broker.port)
    offline.connect("offline", clean_start=False, properties=props)
    offline.send_packet(Subscribe(1, [SubscriptionRequest("flood/#", 1)]))
    assert isinstance(offline.read_packet(), Suback)
    offline.send_packet(Disconnect())
    offline.close()
    publisher = RawClient(broker.port)
    publisher.connect("publisher")
    time.sleep(0.5)
    before = _rss(broker)
    batch = 5000
    for start in range(0, MESSAGES, batch):
        publisher.send(
            b"".join(
                encode(Publish(topic=f"flood/{n}", payload=b"1", qos=1, packet_id=n % 65535 + 1), 5)
                for n in range(start, start + batch)
            )
        )
        for _ in range(batch):
            assert isinstance(publisher.read_packet(60), Puback)
    after = _rss(broker)
    port = wait_port(broker, "metrics")
    queued = metric(port, "xmq_queued_bytes")
    assert queued <= BUDGET
    assert metric(port, "xmq_queued_messages") < MESSAGES  # the budget stopped the queue
    assert metric(port, "xmq_messages_dropped_by_reason_total", 'reason="memory_budget"') > 0
    assert after - before <= BUDGET + BASELINE, (before, after, queued)
    publisher.close()
