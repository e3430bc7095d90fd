"""Retained messages are cluster-wide: stored in Redis, loaded by nodes that start later."""

from __future__ import annotations

import time

import redis
from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes
from tests.support.paho_client import PahoClient, props
from tests.support.redis_server import RedisServer
from xmq.contract import ClusterKeys, RetainedMessage


def _stored(client: redis.Redis, key: str) -> RetainedMessage:
    raw = client.get(key)
    assert isinstance(raw, bytes), f"{key} missing"
    return RetainedMessage.from_json(raw)


def _retained_on(port: int, client_id: str, topic_filter: str) -> dict[str, bytes]:
    """Subscribe a new client and collect the retained messages it is sent."""
    sub = PahoClient(port, client_id)
    sub.connect()
    try:
        sub.subscribe(topic_filter, 1)
        got: dict[str, bytes] = {}
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            while not sub.messages.empty():
                message = sub.messages.get()
                assert message.retain
                assert message.topic not in got, f"{message.topic} sent twice"
                got[message.topic] = message.payload
            time.sleep(0.05)
        return got
    finally:
        sub.disconnect()


def test_later_and_restarted_nodes_serve_the_current_retained_set(
    fresh_cluster: ClusterNodes, redis_server: RedisServer, uid: str
) -> None:
    nodes = fresh_cluster
    nodes.start_many(3)
    pub = PahoClient(nodes.port(1), f"{uid}-p")
    pub.connect()
    expiring = props(PacketTypes.PUBLISH, MessageExpiryInterval=1)
    try:
        for n in range(5):
            pub.publish(f"{uid}/t/{n}", f"v{n}".encode(), qos=1, retain=True)
        pub.publish(f"{uid}/t/1", b"v1-new", qos=1, retain=True)  # replaced
        pub.publish(f"{uid}/t/2", b"", qos=1, retain=True)  # cleared
        pub.publish(f"{uid}/t/x", b"gone soon", qos=1, retain=True, properties=expiring)
    finally:
        pub.disconnect()
    expected = {
        f"{uid}/t/0": b"v0",
        f"{uid}/t/1": b"v1-new",
        f"{uid}/t/3": b"v3",
        f"{uid}/t/4": b"v4",
    }
    time.sleep(1.2)  # the expiring one has expired; the others are in Redis

    keys = ClusterKeys(fresh_cluster.cluster)
    client = redis_server.client()
    try:
        tombstone = _stored(client, keys.retained(f"{uid}/t/2"))
        assert tombstone.tombstone
        assert 0 < client.pttl(keys.retained(f"{uid}/t/2")) <= 24 * 3600 * 1000
        revisions = {topic: _stored(client, keys.retained(topic)).revision for topic in expected}
        assert revisions[f"{uid}/t/1"] > revisions[f"{uid}/t/4"]  # the replacement is newer
    finally:
        client.close()

    assert _retained_on(nodes.port(2), f"{uid}-s2", f"{uid}/#") == expected  # via the links
    nodes.start(4)
    nodes.wait_linked(4)
    assert _retained_on(nodes.port(4), f"{uid}-s4", f"{uid}/#") == expected  # from Redis

    nodes.kill(1)  # SIGKILL
    nodes.start(1)
    nodes.wait_linked(4, timeout=15)
    assert _retained_on(nodes.port(1), f"{uid}-s1", f"{uid}/#") == expected
    assert _retained_on(nodes.port(1), f"{uid}-s1b", f"{uid}/t/1") == {f"{uid}/t/1": b"v1-new"}
