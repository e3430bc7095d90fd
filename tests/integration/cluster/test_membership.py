"""Leases and epochs in Redis; a Redis outage longer than a lease; graceful stop and restart."""

from __future__ import annotations

import time

from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes, routed, wait_for
from tests.support.paho_client import PahoClient, props
from tests.support.redis_server import RedisServer
from xmq.contract import ClusterKeys, NodeLease

EXPIRY = props(PacketTypes.CONNECT, SessionExpiryInterval=3600)


def _lease(redis_server: RedisServer, cluster: str, node_id: str) -> NodeLease | None:
    client = redis_server.client()
    try:
        raw = client.get(ClusterKeys(cluster).lease(node_id))
    finally:
        client.close()
    return None if raw is None else NodeLease.from_json(raw)


def test_lease_and_epoch_in_redis(fresh_cluster: ClusterNodes, redis_server: RedisServer) -> None:
    fresh_cluster.start(1)
    fresh_cluster.wait_linked(1)
    keys = ClusterKeys(fresh_cluster.cluster)
    first = _lease(redis_server, fresh_cluster.cluster, "node-1")
    assert first is not None
    assert first.node_id == "node-1"
    assert first.address.startswith("127.0.0.1:")
    client = redis_server.client()
    try:
        ttl_ms = client.pttl(keys.lease("node-1"))
        assert 0 < ttl_ms <= fresh_cluster.lease_ttl_s * 1000
        assert client.sismember(keys.members(), "node-1")
        fresh_cluster.nodes[1].terminate()
        assert client.get(keys.lease("node-1")) is None  # graceful stop drops the lease
    finally:
        client.close()
    fresh_cluster.start(1)
    fresh_cluster.wait_linked(1)
    second = _lease(redis_server, fresh_cluster.cluster, "node-1")
    assert second is not None
    assert second.epoch == first.epoch + 1


def test_redis_outage_longer_than_a_lease(
    fresh_cluster: ClusterNodes, redis_server: RedisServer, uid: str
) -> None:
    nodes = fresh_cluster
    nodes.start_many(2)
    topic = f"{uid}/outage"
    sub = PahoClient(nodes.port(1), f"{uid}-durable")
    sub.connect(clean_start=True, properties=EXPIRY)
    sub.subscribe(topic, 1)
    routed(nodes.port(1), nodes.port(2), topic, sub)
    sub.disconnect()
    pub = PahoClient(nodes.port(2), f"{uid}-pub")
    pub.connect()
    for n in range(5):
        pub.publish(topic, f"before-{n}", qos=1)
    time.sleep(0.3)

    redis_server.pause()
    try:
        gone = pub.disconnects.get(timeout=nodes.lease_ttl_s * 3)  # the node went offline
        assert gone.reason == 0x89
        refused = PahoClient(nodes.port(1), f"{uid}-late")
        assert refused.connect(timeout=5).reason == 0x88
        refused.close()
    finally:
        redis_server.resume()
    pub.close()

    def back_online() -> bool:
        probe = PahoClient(nodes.port(2), f"{uid}-probe")
        try:
            return probe.connect(timeout=5).reason == 0
        finally:
            probe.close()

    wait_for(back_online, timeout=15, what="nodes back online")
    again = PahoClient(nodes.port(2), f"{uid}-durable")
    result = again.connect(clean_start=False, properties=EXPIRY)
    try:
        assert result.reason == 0
        assert result.session_present
        got = again.expect(5)
        assert [m.payload for m in got] == [f"before-{n}".encode() for n in range(5)]
        time.sleep(1.5)  # links re-formed under the new epochs
        late = PahoClient(nodes.port(1), f"{uid}-pub2")
        late.connect()
        late.publish(topic, b"after", qos=1)
        late.disconnect()
        assert again.expect(1)[0].payload == b"after"
    finally:
        again.disconnect()


def test_sigterm_hands_sessions_over(fresh_cluster: ClusterNodes, uid: str) -> None:
    nodes = fresh_cluster
    nodes.start_many(2)
    topic = f"{uid}/term"
    sub = PahoClient(nodes.port(1), f"{uid}-durable")
    sub.connect(clean_start=True, properties=EXPIRY)
    sub.subscribe(topic, 1)
    routed(nodes.port(1), nodes.port(2), topic, sub)
    assert nodes.nodes[1].terminate() == 0
    sub.close()
    pub = PahoClient(nodes.port(2), f"{uid}-pub")
    pub.connect()
    for n in range(20):
        pub.publish(topic, f"{n}", qos=1)
    pub.disconnect()
    again = PahoClient(nodes.port(2), f"{uid}-durable")
    result = again.connect(clean_start=False, properties=EXPIRY, timeout=5)
    try:
        assert result.session_present  # no wait for a lease: it was dropped at SIGTERM
        got = again.expect(20)
        assert [m.payload for m in got] == [str(n).encode() for n in range(20)]
    finally:
        again.disconnect()


def test_restarted_node_restores_the_session(fresh_cluster: ClusterNodes, uid: str) -> None:
    nodes = fresh_cluster
    nodes.start_many(2)
    topic = f"{uid}/restart"
    sub = PahoClient(nodes.port(1), f"{uid}-durable")
    sub.connect(clean_start=True, properties=EXPIRY)
    sub.subscribe(topic, 2)
    sub.disconnect()
    pub = PahoClient(nodes.port(2), f"{uid}-pub")
    pub.connect()
    time.sleep(0.5)
    for n in range(10):
        pub.publish(topic, f"{n}", qos=2)
    pub.disconnect()
    time.sleep(0.3)
    nodes.kill(1)
    nodes.start(1)
    nodes.wait_linked(2)
    again = PahoClient(nodes.port(1), f"{uid}-durable")
    result = again.connect(clean_start=False, properties=EXPIRY, timeout=nodes.lease_ttl_s + 10)
    try:
        assert result.session_present
        got = again.expect(10)
        assert [m.payload for m in got] == [str(n).encode() for n in range(10)]
        again.expect_none(0.5)
    finally:
        again.disconnect()


def test_node_started_after_the_owner_died_queues_for_it(
    fresh_cluster: ClusterNodes, uid: str
) -> None:
    nodes = fresh_cluster
    nodes.start_many(2)
    topic = f"{uid}/late"
    sub = PahoClient(nodes.port(2), f"{uid}-durable")
    sub.connect(clean_start=True, properties=EXPIRY)
    sub.subscribe(topic, 1)
    time.sleep(0.3)
    nodes.kill(2)
    sub.close()
    nodes.start(3)  # never linked to node 2: learns its sessions from Redis
    nodes.wait_linked(2)
    pub = PahoClient(nodes.port(3), f"{uid}-pub")
    pub.connect()
    # 0: each one is queued for the session (0x10 would say node 3 did not know it)
    assert [pub.publish(topic, f"{n}", qos=1) for n in range(10)] == [0] * 10
    pub.disconnect()
    again = PahoClient(nodes.port(1), f"{uid}-durable")
    result = again.connect(clean_start=False, properties=EXPIRY, timeout=nodes.lease_ttl_s + 10)
    try:
        assert result.session_present
        got = again.expect(10)
        assert [m.payload for m in got] == [str(n).encode() for n in range(10)]
    finally:
        again.disconnect()


def test_expired_session_of_a_dead_owner_leaves_redis(
    fresh_cluster: ClusterNodes, redis_server: RedisServer, uid: str
) -> None:
    nodes = fresh_cluster
    nodes.start(1)
    nodes.wait_linked(1)
    client_id = f"{uid}-short"
    sub = PahoClient(nodes.port(1), client_id)
    sub.connect(properties=props(PacketTypes.CONNECT, SessionExpiryInterval=1))
    sub.subscribe(f"{uid}/x", 1)
    sub.disconnect()
    time.sleep(0.3)
    nodes.kill(1)  # the owner's timer never runs: Redis must expire the session itself
    keys = ClusterKeys(nodes.cluster)
    client = redis_server.client()
    try:
        assert client.exists(keys.session_owner(client_id), keys.session_subscriptions(client_id))
        wait_for(
            lambda: (
                not client.exists(
                    keys.session_owner(client_id), keys.session_subscriptions(client_id)
                )
            ),
            timeout=5,
            what="session keys to expire",
        )
    finally:
        client.close()
