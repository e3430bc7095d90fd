"""Exactly-once for QoS 2 across a kill -9 of the node a message was forwarded to.

Persistent QoS 2 sessions live on node 2 (their clients gone, so node 2 records every message
for them); a publisher on node 1 streams QoS 2 messages; node 2 is killed (SIGKILL) in the
middle of the stream. Node 1 replays every message node 2 had not confirmed with PUBLISH_ACK:
before forward ids, one node 2 had recorded just before dying was queued twice (the known gap
of the survivability run). The sessions are resumed on node 3: every message exactly once.
Repeated with a new node 2 a few times, since the race depends on the instant of the kill.
"""

from __future__ import annotations

import collections
import queue
import time

from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes, clear_dead_lease, routed
from tests.support.paho_client import PahoClient, props
from tests.support.redis_server import RedisServer

EXPIRY = props(PacketTypes.CONNECT, SessionExpiryInterval=3600)
ROUNDS = 3
SESSIONS = 6
MESSAGES = 1200


def _receive_all(client: PahoClient, count: int, timeout: float) -> list[int]:
    got: list[int] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        try:
            got.append(int(client.messages.get(timeout=0.5).payload))
        except queue.Empty:
            continue
    time.sleep(0.5)  # a duplicate would come right behind
    while not client.messages.empty():
        got.append(int(client.messages.get().payload))
    return got


def _one_round(nodes: ClusterNodes, redis_server: RedisServer, name: str) -> dict[str, object]:
    topic = f"{name}/stream"
    client_ids = [f"{name}-s{n}" for n in range(SESSIONS)]
    for n, client_id in enumerate(client_ids):
        subscriber = PahoClient(nodes.port(2), client_id)
        subscriber.connect(clean_start=True, properties=EXPIRY)
        subscriber.subscribe(topic, 2)
        if n == SESSIONS - 1:
            routed(nodes.port(2), nodes.port(1), topic, subscriber)
        subscriber.disconnect()  # the session stays on node 2, which records its messages
    publisher = PahoClient(nodes.port(1), f"{name}-pub")
    publisher.client.max_inflight_messages_set(1000)  # many messages on their way at the kill
    publisher.connect()
    for n in range(MESSAGES):
        publisher.publish(topic, f"{n}", qos=2, wait=n % 400 == 399, timeout=30)
        if n == MESSAGES // 2:
            time.sleep(0.005)  # the burst is on its way through node 1 to node 2
            nodes.kill(2)
            clear_dead_lease(redis_server, nodes.cluster, "node-2")
    publisher.disconnect()
    duplicates: dict[str, int] = {}
    missing: dict[str, int] = {}
    for client_id in client_ids:
        again = PahoClient(nodes.port(3), client_id)
        result = again.connect(clean_start=False, properties=EXPIRY, timeout=15)
        assert result.session_present
        try:
            counts = collections.Counter(_receive_all(again, MESSAGES, timeout=30))
        finally:
            again.disconnect(props(PacketTypes.DISCONNECT, SessionExpiryInterval=0))
        duplicates[client_id] = sum(c - 1 for c in counts.values() if c > 1)
        missing[client_id] = len(set(range(MESSAGES)) - set(counts))
    return {"duplicates": sum(duplicates.values()), "missing": sum(missing.values())}


def test_no_duplicate_when_the_receiving_node_is_killed(
    fresh_cluster: ClusterNodes, redis_server: RedisServer, uid: str
) -> None:
    nodes = fresh_cluster
    nodes.start_many(3)
    results = []
    for round_no in range(ROUNDS):
        if round_no:
            nodes.start(2)  # a new run of node-2
            nodes.wait_linked(3)
        results.append(_one_round(nodes, redis_server, f"{uid}-r{round_no}"))
    print(f"forwarded exactly-once rounds: {results}")
    assert all(r == {"duplicates": 0, "missing": 0} for r in results), results
