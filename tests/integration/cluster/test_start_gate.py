"""A node that starts accepts clients only once it knows its live peers' routes.

Its peers with a smaller id dial it on their next peer-loop pass after their membership read
shows its lease (~1-2 s); before, it listened at once. A subscription made on a peer after the
new node read Redis and before that link formed was unknown to it: a message published on it
matched nothing, PUBACK 0x10, lost though the subscriber had its SUBACK — the flake of
``test_partitions.py::test_the_survivability_bench_s_partition_fault`` (~1 run in 8: a link to
node-3 formed 0.1-0.4 s before the bench's first publish in passing runs, after it in failing
ones). Here node-3 starts cut from node-2 (not from node-1 or Redis) and the cut heals 0.8 s
after it joined: the client steps run inside that window when node-3 listens at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import wait_for_lease
from tests.support.namespace_network import NamespacedNodes, namespaced_cluster
from tests.support.paho_client import PahoClient, props

pytestmark = pytest.mark.integration

LEASE_TTL_S = 5.0  # the start waits at most 1 + 1 + 1 s for the peers' links
HEAL_AFTER_JOIN_S = 0.8
EXPIRY = props(PacketTypes.CONNECT, SessionExpiryInterval=600)


@pytest.fixture
def nodes(uid: str) -> Iterator[NamespacedNodes]:
    with namespaced_cluster(f"gate-{uid}", 2, lease_ttl_s=LEASE_TTL_S) as started:
        yield started


def _heal_after_join(nodes: NamespacedNodes) -> None:
    wait_for_lease(nodes.redis, nodes.cluster, "node-3")
    time.sleep(HEAL_AFTER_JOIN_S)
    nodes.network.heal("node-3")


def test_a_starting_node_accepts_clients_once_it_knows_its_peers_routes(
    nodes: NamespacedNodes, uid: str
) -> None:
    topic = f"{uid}/gate"
    nodes.network.add("node-3")
    nodes.network.cut("node-3", ["node-2"])
    healer = threading.Thread(target=_heal_after_join, args=(nodes,), daemon=True)
    healer.start()
    started = time.monotonic()
    nodes.start(3)  # returns when node-3 listens
    listening_after = time.monotonic() - started
    sub = PahoClient(nodes.port(2), f"{uid}-sub", host=nodes.address(2))
    pub = PahoClient(nodes.port(3), f"{uid}-pub", host=nodes.address(3))
    try:
        assert sub.connect(clean_start=True, properties=EXPIRY).reason == 0
        sub.subscribe(topic, qos=1)  # SUBACK: recorded in Redis, routed on node-2
        pub.connect(clean_start=True)
        reason = pub.publish(topic, b"published on a node that just started", qos=1)
        healed = not healer.is_alive()
        assert reason == 0, (
            f"PUBACK {reason:#x} for a subscribed client (node-3 listened after "
            f"{listening_after:.2f}s, cut healed when published: {healed})"
        )
        assert [m.payload for m in sub.expect(1, timeout=10)] == [
            b"published on a node that just started"
        ]
        assert "no route snapshot" not in nodes.nodes[3].log()
    finally:
        pub.close()
        sub.close()
        healer.join(10)
