"""The memory budget bounds real memory for a cluster node's persistent sessions: a fan-out
another node forwards to thousands of persistent sessions here (a durable record each) grows
this node's RSS by what ``xmq_queued_bytes`` counts for it plus a small fixed allowance.

Before, each such delivery stayed a ``Delivery`` object with a record of its own in a deque of
its session (~470 bytes against 152 counted), and the records waiting for Redis piled up
unbounded (40,000 at once): 10 messages to 20,000 sessions grew node-2 by 150-190 MB against
a 64 MiB budget (docs/benchmarks.md, "Fan-outs from another node")."""

from __future__ import annotations

import pytest

from tests.integration.broker.test_memory_budget import _rss
from tests.integration.cluster.test_peer_fanout_slices import MESSAGES, SESSIONS, _fan_out_ready
from tests.support.cluster_nodes import ClusterNodes
from tests.support.http_probe import metric, wait_port
from tests.support.redis_server import RedisServer
from xmq.codec.packets import Puback

pytestmark = pytest.mark.integration

ALLOWANCE = 12 * 1024 * 1024
"""Allocator slack and the fan-out's buffers: fixed, whatever the fan-out's size."""


def test_a_fan_out_from_another_node_grows_rss_by_what_the_budget_counts(
    redis_server: RedisServer, uid: str
) -> None:
    nodes = ClusterNodes(redis_server, f"fanm-{uid}", metrics=True)
    try:
        watcher, pinger, pub, flood = _fan_out_ready(nodes, uid)
        node = nodes.nodes[2]
        port = wait_port(node, "metrics")
        queued_before = metric(port, "xmq_queued_bytes")
        before = _rss(node)
        pub.send(flood)  # SESSIONS x MESSAGES durable deliveries on node-2
        for _ in range(MESSAGES):
            packet = pub.read_packet(120)
            assert isinstance(packet, Puback) and packet.reason_code == 0, packet
        grown = _rss(node) - before
        queued = metric(port, "xmq_queued_bytes") - queued_before
        # every delivery is queued and counted (the watcher's are sent, not queued)
        assert metric(port, "xmq_queued_messages") >= SESSIONS * MESSAGES
        assert grown <= queued + ALLOWANCE, (grown / 2**20, queued / 2**20)
        for client_ in (watcher, pinger, pub):
            client_.close()
    finally:
        nodes.stop_all()
