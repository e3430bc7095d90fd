"""A session claimed for a client that left during the claim keeps its messages, and expires.

A client resumes its persistent session on another node and closes its socket while that
node's claim is on its way (Redis paused, the old owner's hand-over to come). The claim then
succeeds: Redis names node-2's run as the owner, and node-1 has handed the session over. The
node reads nothing from the client during the claim (reading is paused until the CONNACK), so
here it notices the close when it answers, and parks the session as for any disconnect; a
close noticed during the claim (its login task) is played in
``tests/unit/core/test_abandoned_claim.py``. Messages for the session, published on either
node, must be kept for the client, and every key of the session must expire with it — also
its queue, created by the first message after the disconnect (before: no TTL, a key left in
Redis for good once no node was left to end the session).
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest
from paho.mqtt.packettypes import PacketTypes
from redis import Redis

from tests.support.cluster_nodes import ClusterNodes, wait_for
from tests.support.paho_client import PahoClient, props
from tests.support.redis_server import RedisServer
from xmq.contract import ClusterKeys
from xmq.contract.records import SessionOwner

pytestmark = pytest.mark.integration

EXPIRY_S = 600


def _connect_and_leave(port: int, client_id: str, redis_server: RedisServer) -> None:
    """An MQTT 5 CONNECT resuming ``client_id``'s session, sent while Redis is paused; the
    socket is closed before Redis resumes, so the node's claim answers a gone client."""
    name = client_id.encode()
    variable = b"\x00\x04MQTT\x05\x00\x00\x3c" + b"\x05\x11" + struct.pack(">I", EXPIRY_S)
    body = variable + struct.pack(">H", len(name)) + name
    redis_server.pause()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(bytes((0x10, len(body))) + body)
            time.sleep(0.5)  # read by the node, its claim waiting for Redis
    finally:
        redis_server.resume()


def _assert_expiring(redis: Redis, keys: ClusterKeys, client_id: str) -> None:
    """Every key of the parked session that exists will expire (within its expiry + 1 s)."""
    for key in (
        keys.session_owner(client_id),
        keys.session_state(client_id),
        keys.session_subscriptions(client_id),
        keys.session_queue(client_id),
    ):
        ttl = redis.ttl(key)
        assert ttl != -2, f"{key} missing"
        assert 0 < ttl <= EXPIRY_S + 1, f"{key}: TTL {ttl}, the session's keys never expire"


@pytest.fixture
def cluster(redis_server: RedisServer, uid: str) -> Iterator[ClusterNodes]:
    nodes = ClusterNodes(redis_server, f"abandoned-{uid}", lease_ttl_s=10.0)
    try:
        yield nodes
    finally:
        nodes.stop_all()


def test_a_session_claimed_for_a_client_that_left_keeps_its_messages_and_expires(
    cluster: ClusterNodes, redis_server: RedisServer, uid: str
) -> None:
    topic = f"{uid}/abandoned"
    client_id = f"{uid}-sub"
    keys = ClusterKeys(cluster.cluster)
    redis = redis_server.client()
    cluster.start_many(2)
    cluster.wait_linked(2)
    sub = PahoClient(cluster.port(1), client_id)
    pubs: list[PahoClient] = []
    try:
        sub.connect(
            clean_start=True, properties=props(PacketTypes.CONNECT, SessionExpiryInterval=EXPIRY_S)
        )
        sub.subscribe(topic, qos=1)
        sub.disconnect()  # the session stays on node-1
        sub.close()
        _connect_and_leave(cluster.port(2), client_id, redis_server)

        def owned_by_node_2() -> bool:
            raw = redis.get(keys.session_owner(client_id))
            return raw is not None and SessionOwner.from_json(raw).node_id == "node-2"

        wait_for(owned_by_node_2, 10, "node-2's claim")
        # parked at once, before any message for it: the claim's PERSIST is undone
        wait_for(
            lambda: 0 < redis.ttl(keys.session_state(client_id)) <= EXPIRY_S + 1,
            5,
            "the claimed session's expiry",
        )
        time.sleep(1.0)  # node-1 has handed the session over and told node-2
        for index in (1, 2):
            pub = PahoClient(cluster.port(index), f"{uid}-pub{index}")
            pubs.append(pub)
            pub.connect(clean_start=True)
            reason = pub.publish(topic, f"via node-{index}".encode(), qos=1)
            assert reason == 0, f"PUBACK {reason:#x} on node-{index} for a claimed session"
        # the session is parked like a disconnected one: its keys expire with it
        _assert_expiring(redis, keys, client_id)
        for index in (2, 1):
            back = PahoClient(cluster.port(index), client_id)
            try:
                connack = back.connect(
                    clean_start=False,
                    properties=props(PacketTypes.CONNECT, SessionExpiryInterval=EXPIRY_S),
                )
                assert connack.session_present
                if index == 2:
                    got = sorted(m.payload for m in back.expect(2, timeout=10))
                    assert got == [b"via node-1", b"via node-2"]
                else:
                    back.expect_none(0.5)  # each once
            finally:
                back.close()
    finally:
        for pub in pubs:
            pub.close()
        redis.close()


def test_a_queue_filled_after_the_disconnect_expires_with_its_session(
    cluster: ClusterNodes, redis_server: RedisServer, uid: str
) -> None:
    """A session parked with an empty queue: the messages recorded for it afterwards create
    the queue key, which must expire with the session even when its node dies (nobody then
    runs the session's expiry timer). Before, that key lived on in Redis for good: a leak per
    such session, and a later session of the same client id could be handed its messages."""
    topic = f"{uid}/parked"
    client_id = f"{uid}-parked"
    keys = ClusterKeys(cluster.cluster)
    redis = redis_server.client()
    cluster.start(1)
    sub = PahoClient(cluster.port(1), client_id)
    pub = PahoClient(cluster.port(1), f"{uid}-pub")
    try:
        sub.connect(
            clean_start=True, properties=props(PacketTypes.CONNECT, SessionExpiryInterval=3)
        )
        sub.subscribe(topic, qos=1)
        sub.disconnect()
        sub.close()
        pub.connect(clean_start=True)
        assert pub.publish(topic, b"queued while parked", qos=1) == 0
        wait_for(lambda: redis.llen(keys.session_queue(client_id)) == 1, 5, "the record")
        ttl = redis.ttl(keys.session_queue(client_id))
        assert 0 < ttl <= 4, f"queue TTL {ttl} while its session expires in 3 s"
        cluster.kill(1)  # nobody runs the session's expiry timer now
        wait_for(lambda: not redis.exists(keys.session_state(client_id)), 10, "its expiry")
        assert not redis.exists(keys.session_queue(client_id)), "the queue outlived its session"
    finally:
        pub.close()
        redis.close()
