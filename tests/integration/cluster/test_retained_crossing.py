"""Retained changes of one topic made on two nodes at the same instant: every node ends with
the one Redis holds (issue 12). Node 1 sets each topic to ``a`` and node 2 to ``b`` in one
write each, at once: the two changes of a topic cross on the link, so each node applies the
other's after its own, while Redis keeps whichever ``SET_RETAINED`` gave the higher revision.
Before the WRITTEN announcements, node 1 ended holding ``b`` and node 2 ``a`` for most of them
(docs/cluster.md, "Retained messages")."""

from __future__ import annotations

import base64
import threading
import time

import pytest

from tests.support.cluster_nodes import ClusterNodes, wait_for
from tests.support.http_probe import metric, wait_port
from tests.support.paho_client import PahoClient
from tests.support.raw_client import connected
from tests.support.redis_server import RedisServer
from xmq.codec.packets import Disconnect, Publish
from xmq.codec.writer import encode
from xmq.contract import ClusterKeys, RetainedMessage

pytestmark = pytest.mark.integration

TOPICS = 200


def _held(port: int, client_id: str, topic_filter: str, count: int) -> dict[str, bytes]:
    """The retained messages a new subscriber on ``port`` is sent (``count`` expected)."""
    sub = PahoClient(port, client_id)
    sub.connect()
    try:
        sub.subscribe(topic_filter, 0)
        got: dict[str, bytes] = {}
        deadline = time.monotonic() + 10
        while len(got) < count and time.monotonic() < deadline:
            while not sub.messages.empty():
                message = sub.messages.get()
                assert message.retain
                got[message.topic] = message.payload
            time.sleep(0.05)
        return got
    finally:
        sub.disconnect()


def _in_redis(redis_server: RedisServer, keys: ClusterKeys, topics: list[str]) -> dict[str, bytes]:
    """The payload Redis holds for each of ``topics`` (those it holds)."""
    client = redis_server.client()
    try:
        raws = client.mget([keys.retained(topic) for topic in topics])
    finally:
        client.close()
    stored: dict[str, bytes] = {}
    for topic, raw in zip(topics, raws, strict=True):
        if isinstance(raw, bytes):
            stored[topic] = base64.b64decode(RetainedMessage.from_json(raw).payload_b64)
    return stored


def test_changes_of_one_topic_crossing_between_two_nodes_converge_on_redis_s(
    redis_server: RedisServer, uid: str
) -> None:
    nodes = ClusterNodes(redis_server, f"cross-{uid}", metrics=True)
    try:
        _cross(nodes, redis_server, uid)
    finally:
        nodes.stop_all()


def _cross(nodes: ClusterNodes, redis_server: RedisServer, uid: str) -> None:
    nodes.start_many(2)
    nodes.wait_linked(2)
    topics = [f"{uid}/r/{n}" for n in range(TOPICS)]
    batches = {
        index: b"".join(encode(Publish(topic, payload, 0, retain=True), 5) for topic in topics)
        + encode(Disconnect(), 5)
        for index, payload in ((1, b"a"), (2, b"b"))
    }
    clients = {index: connected(nodes.port(index), f"{uid}-p{index}") for index in (1, 2)}
    start = threading.Barrier(2)

    def publish(index: int) -> None:
        start.wait()
        clients[index].send(batches[index])

    threads = [threading.Thread(target=publish, args=(index,)) for index in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    keys = ClusterKeys(nodes.cluster)
    wait_for(lambda: len(_in_redis(redis_server, keys, topics)) == TOPICS, 10, "writes")
    time.sleep(1.0)  # the links, the announcements and any re-read settle
    stored = _in_redis(redis_server, keys, topics)
    held = {
        index: _held(nodes.port(index), f"{uid}-s{index}", f"{uid}/r/#", TOPICS) for index in (1, 2)
    }
    for client in clients.values():
        client.close()
    for index in (1, 2):
        differing = sorted(topic for topic in topics if held[index].get(topic) != stored[topic])
        assert not differing, f"node {index} differs from Redis on {len(differing)} topics"
    # the changes did cross (a node re-read topics), and every wait ended
    ports = {index: wait_port(nodes.nodes[index], "metrics") for index in (1, 2)}
    reread = sum(metric(port, "xmq_cluster_retained", 'kind="reread"') for port in ports.values())
    assert reread > 0
    for port in ports.values():
        assert metric(port, "xmq_cluster_retained", 'kind="pending_topics"') == 0
