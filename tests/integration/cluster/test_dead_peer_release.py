"""A node killed with its lease still valid, no operator around: its lease is released by a
peer once its link port refuses connections and the lease has gone unrenewed for two renewal
intervals — well before the lease TTL — and the publishers' held acknowledgements for its
persistent sessions go out then (before: only once the lease expired)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes, routed
from tests.support.http_probe import metric, wait_port
from tests.support.paho_client import PahoClient, props
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

LEASE_TTL_S = 8.0  # renewed every 1.6 s: released after 2 x 1.6 s + 0.25 s unrenewed
EXPIRY = props(PacketTypes.CONNECT, SessionExpiryInterval=600)


@pytest.fixture
def two_nodes(redis_server: RedisServer, uid: str) -> Iterator[ClusterNodes]:
    nodes = ClusterNodes(redis_server, f"dead-{uid}", lease_ttl_s=LEASE_TTL_S, metrics=True)
    try:
        nodes.start_many(2)
        yield nodes
    finally:
        nodes.stop_all()


def test_a_killed_node_s_lease_is_released_before_its_ttl(
    two_nodes: ClusterNodes, redis_server: RedisServer, uid: str
) -> None:
    nodes = two_nodes
    metrics_1 = wait_port(nodes.nodes[1], "metrics")
    topic = f"{uid}/dead"
    sub = PahoClient(nodes.port(2), f"{uid}-sub")
    pub = PahoClient(nodes.port(1), f"{uid}-pub")
    try:
        sub.connect(clean_start=True, properties=EXPIRY)
        sub.subscribe(topic, qos=1)
        routed(nodes.port(2), nodes.port(1), topic, sub)
        sub.drop()  # (its socket dies with node-2 anyway)
        pub.connect()

        nodes.kill(2)  # SIGKILL: its lease stays in Redis for up to 8 s
        killed = time.monotonic()
        assert pub.publish(topic, b"after the kill", qos=1, timeout=30) == 0
        waited = time.monotonic() - killed
        released = metric(metrics_1, "xmq_cluster_link_events_total", 'event="dead_peer_released"')
        print(f"PUBACK {waited:.1f}s after the kill (lease TTL {LEASE_TTL_S}s)")
        assert released == 1
        # the run's last renewal was at most 1.6 s before the kill: waiting for the TTL would
        # hold the ack 6.4 s or more
        assert waited < LEASE_TTL_S - 2.0

        back = PahoClient(nodes.port(1), f"{uid}-sub")
        try:
            assert back.connect(clean_start=False, properties=EXPIRY).session_present
            assert [m.payload for m in back.expect(1)] == [b"after the kill"]
        finally:
            back.close()
    finally:
        pub.close()
        sub.close()
