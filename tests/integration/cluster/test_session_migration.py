"""The seed check: a persistent session survives kill -9 of its node, nothing lost or doubled.

Four nodes; a persistent subscriber (fixed client id) on node 3; node 3 is killed with SIGKILL;
messages are published from node 1 while it is down; the client reconnects to node 4 and must
receive every one of them exactly once, and a clean subscriber on node 2 must see them all too.
"""

from __future__ import annotations

import queue
import time

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes, clear_dead_lease, routed
from tests.support.paho_client import PahoClient, Received, props
from tests.support.redis_server import RedisServer
from xmq.contract import ClusterKeys

MESSAGES = 10_000
EXPIRY = props(PacketTypes.CONNECT, SessionExpiryInterval=3600)


def _collect(client: PahoClient, count: int, timeout: float) -> list[Received]:
    got: list[Received] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        try:
            got.append(client.messages.get(timeout=0.5))
        except queue.Empty:
            continue
    time.sleep(0.5)
    while not client.messages.empty():
        got.append(client.messages.get())
    return got


def _clear_lease_now(redis_server: RedisServer, cluster: str, node_id: str) -> None:
    """What the operator does for a dead pod: compare-and-delete its lease."""
    clear_dead_lease(redis_server, cluster, node_id)
    client = redis_server.client()
    try:
        assert client.get(ClusterKeys(cluster).lease(node_id)) is None
    finally:
        client.close()


CASES = [
    ("qos1", 1, "expire"),
    ("qos1", 1, "cleared"),
    ("qos2", 2, "expire"),
    ("qos2", 2, "cleared"),
]


@pytest.mark.parametrize(
    ("name", "qos", "lease"), CASES, ids=[f"{name}-lease-{lease}" for name, _, lease in CASES]
)
def test_persistent_session_survives_kill_9(
    fresh_cluster: ClusterNodes,
    redis_server: RedisServer,
    uid: str,
    name: str,
    qos: int,
    lease: str,
) -> None:
    nodes = fresh_cluster
    nodes.start_many(4)
    topic = f"{uid}/seed"
    client_id = f"{uid}-persistent"
    total = MESSAGES

    durable = PahoClient(nodes.port(3), client_id)
    durable.connect(clean_start=True, properties=EXPIRY)
    durable.subscribe(topic, qos)
    live = PahoClient(nodes.port(2), f"{uid}-live")
    live.connect()
    live.subscribe(topic, qos)
    routed(nodes.port(3), nodes.port(1), topic, durable)
    while not live.messages.empty():
        live.messages.get()

    nodes.kill(3)
    durable.close()
    if lease == "cleared":
        _clear_lease_now(redis_server, nodes.cluster, "node-3")

    publisher = PahoClient(nodes.port(1), f"{uid}-pub")
    publisher.connect()
    for n in range(total):
        publisher.publish(topic, f"{n}", qos=qos, wait=n % 500 == 499, timeout=30)
    publisher.publish(topic, "end", qos=qos, timeout=30)
    publisher.disconnect()

    again = PahoClient(nodes.port(4), client_id)
    result = again.connect(clean_start=False, properties=EXPIRY, timeout=nodes.lease_ttl_s + 10)
    try:
        assert result.reason == 0
        assert result.session_present
        got = _collect(again, total + 1, timeout=60)
        payloads = [m.payload for m in got]
        numbers = [int(p) for p in payloads if p != b"end"]
        missing = set(range(total)) - set(numbers)
        duplicates = len(numbers) - len(set(numbers))
        assert not missing, f"{len(missing)} missing"
        assert duplicates == 0
        assert payloads.count(b"end") == 1
        seen_live = _collect(live, total + 1, timeout=30)
        assert sorted(int(m.payload) for m in seen_live if m.payload != b"end") == list(
            range(total)
        )
    finally:
        again.disconnect()
        live.disconnect()


def test_kill_9_of_the_owner_while_messages_flow(
    fresh_cluster: ClusterNodes, redis_server: RedisServer, uid: str
) -> None:
    """max_queued_writes 0: every message was recorded before delivery, so a kill -9 of the
    owner in the middle of a stream loses nothing (redeliveries are allowed: QoS 1)."""
    nodes = fresh_cluster
    nodes.start_many(3)
    topic = f"{uid}/stream"
    client_id = f"{uid}-persistent"
    durable = PahoClient(nodes.port(2), client_id)
    durable.connect(clean_start=True, properties=EXPIRY)
    durable.subscribe(topic, 1)
    routed(nodes.port(2), nodes.port(1), topic, durable)
    publisher = PahoClient(nodes.port(1), f"{uid}-pub")
    publisher.connect()
    total = 3000
    seen: set[int] = set()
    for n in range(total):
        publisher.publish(topic, f"{n}", qos=1, wait=n % 200 == 199, timeout=30)
        if n == total // 2:
            nodes.kill(2)
            _clear_lease_now(redis_server, nodes.cluster, "node-2")
    publisher.disconnect()
    durable.close()
    while not durable.messages.empty():
        seen.add(int(durable.messages.get().payload))
    again = PahoClient(nodes.port(3), client_id)
    result = again.connect(clean_start=False, properties=EXPIRY, timeout=nodes.lease_ttl_s + 10)
    try:
        assert result.session_present
        got = _collect(again, total - len(seen), timeout=30)
        seen.update(int(m.payload) for m in got)
        missing = set(range(total)) - seen
        assert missing == set()
    finally:
        again.disconnect()
