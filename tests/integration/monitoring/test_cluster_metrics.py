"""The cluster metrics the alerts use move when they should: a Redis outage longer than the
lease TTL counts failed renewals, drops the lease (held 0) and counts one loss; the node
rejoins once Redis answers (real Redis paused with SIGSTOP, real broker processes)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cluster_nodes import ClusterNodes, wait_for
from tests.support.http_probe import metric, wait_port
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


def test_a_redis_outage_shows_in_the_lease_metrics(redis_server: RedisServer) -> None:
    nodes = ClusterNodes(redis_server, "metrics-outage", metrics=True)
    try:
        nodes.start_many(2)
        port = wait_port(nodes.nodes[1], "metrics")
        node = 'node="node-1"'
        wait_for(lambda: metric(port, "xmq_cluster_members", node) == 2, 10, "two members")
        assert metric(port, "xmq_cluster_lease_held", node) == 1
        assert metric(port, "xmq_cluster_lease_losses_total", node) == 0
        assert metric(port, "xmq_cluster_redis_errors_total", node) == 0
        assert metric(port, "xmq_memory_budget_bytes") == 512 * 1024 * 1024

        redis_server.pause()
        try:
            wait_for(
                lambda: metric(port, "xmq_cluster_lease_held", node) == 0,
                20,
                "the lease to be lost while Redis does not answer",
            )
            assert metric(port, "xmq_cluster_redis_errors_total", node) >= 1
            assert metric(port, "xmq_cluster_lease_losses_total", node) == 1
        finally:
            redis_server.resume()
        wait_for(lambda: metric(port, "xmq_cluster_lease_held", node) == 1, 20, "the rejoin")
        assert metric(port, "xmq_cluster_lease_losses_total", node) == 1
    finally:
        nodes.stop_all()
