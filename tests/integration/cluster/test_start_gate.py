"""A node that starts, or comes back online, accepts clients only once it knows its live peers'
routes.

Its peers with a smaller id dial it on their next peer-loop pass after their membership read
shows its lease (~1-2 s); before, it listened at once. A subscription made on a peer after the
new node read Redis and before that link formed was unknown to it: a message published on it
matched nothing, PUBACK 0x10, lost though the subscriber had its SUBACK — the flake of
``test_partitions.py::test_the_survivability_bench_s_partition_fault`` (~1 run in 8: a link to
node-3 formed 0.1-0.4 s before the bench's first publish in passing runs, after it in failing
ones). Here node-3 starts cut from node-2 (not from node-1 or Redis) and the cut heals 0.8 s
after it joined: the client steps run inside that window when node-3 listens at once.

A node back online after losing its lease (a new epoch) closed its links on going offline: the
same gap until they re-form, and the same wait (CONNECT answered 0x88 meanwhile).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import wait_for, wait_for_lease
from tests.support.namespace_network import NamespacedNodes, namespaced_cluster
from tests.support.paho_client import PahoClient, props
from xmq.contract.keys import ClusterKeys

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


def _connect_when_accepted(nodes: NamespacedNodes, index: int, client_id: str) -> PahoClient:
    """A client of node ``index`` connected, CONNECT sent again while answered 0x88."""
    deadline = time.monotonic() + 15
    while True:
        client = PahoClient(nodes.port(index), client_id, host=nodes.address(index))
        reason = client.connect(clean_start=True).reason
        if reason == 0:
            return client
        client.close()
        assert reason == 0x88, f"CONNECT {reason:#x}"
        assert time.monotonic() < deadline, "CONNECT refused for 15 s"
        time.sleep(0.05)


def test_a_node_back_online_accepts_clients_once_it_knows_its_peers_routes(
    nodes: NamespacedNodes, uid: str
) -> None:
    """Node-3's lease is cleared (as by an operator; an expiry does the same): it goes
    offline, closing its links, and rejoins with a new epoch while cut from node-2; the cut
    heals 0.8 s after it is back online. A message published on it for node-2's subscriber
    must reach it — before, node-3 accepted clients as soon as its orphans were read and
    answered 0x10."""
    topic = f"{uid}/rejoin"
    nodes.start(3)
    sub = PahoClient(nodes.port(2), f"{uid}-sub", host=nodes.address(2))
    pub: PahoClient | None = None
    healer = threading.Timer(HEAL_AFTER_JOIN_S, nodes.network.heal, args=("node-3",))
    try:
        assert sub.connect(clean_start=True).reason == 0
        sub.subscribe(topic, qos=1)
        nodes.network.cut("node-3", ["node-2"])
        redis = nodes.redis.client()
        try:
            assert redis.delete(ClusterKeys(nodes.cluster).lease("node-3")) == 1
        finally:
            redis.close()
        wait_for(lambda: "back online" in nodes.nodes[3].log(), 15, "node-3 back online")
        healer.start()
        pub = _connect_when_accepted(nodes, 3, f"{uid}-pub")
        reason = pub.publish(topic, b"published on a node back online", qos=1)
        assert reason == 0, (
            f"PUBACK {reason:#x} for a subscribed client (cut healed when published: "
            f"{not healer.is_alive()})"
        )
        assert [m.payload for m in sub.expect(1, timeout=10)] == [
            b"published on a node back online"
        ]
    finally:
        healer.cancel()
        if pub is not None:
            pub.close()
        sub.close()
