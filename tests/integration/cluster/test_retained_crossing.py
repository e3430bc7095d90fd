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
from functools import partial

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
ROUNDS = 5


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
    """Rounds of crossing changes until one made a node re-read (on a loaded machine a node
    may apply all of the other's changes before its own: nothing crossed); every round must
    end with both nodes holding Redis's values."""
    nodes.start_many(2)
    nodes.wait_linked(2)
    ports = {index: wait_port(nodes.nodes[index], "metrics") for index in (1, 2)}
    keys = ClusterKeys(nodes.cluster)
    topics = [f"{uid}/r/{n}" for n in range(TOPICS)]
    reread = 0.0
    for round_ in range(ROUNDS):
        payloads = {1: f"a{round_}".encode(), 2: f"b{round_}".encode()}
        _publish_at_once(nodes, f"{uid}-{round_}", topics, payloads)
        values = set(payloads.values())
        wait_for(partial(_written, redis_server, keys, topics, values), 10, "writes")
        differing: dict[int, int] = {}
        converged = partial(
            _converged, nodes, redis_server, keys, f"{uid}-{round_}", topics, differing
        )
        try:  # checked again until the links, announcements and re-reads settle
            wait_for(converged, 15, "convergence")
        except TimeoutError:
            pytest.fail(f"round {round_}: nodes differ from Redis on {differing} topics")
        wait_for(  # every wait ended
            lambda: all(
                metric(port, "xmq_cluster_retained", 'kind="pending_topics"') == 0
                for port in ports.values()
            ),
            10,
            "no topic left waiting",
        )
        reread = sum(
            metric(port, "xmq_cluster_retained", 'kind="reread"') for port in ports.values()
        )
        if reread:
            break
    assert reread > 0, f"the changes never crossed in {ROUNDS} rounds"


def _converged(
    nodes: ClusterNodes,
    redis_server: RedisServer,
    keys: ClusterKeys,
    client_prefix: str,
    topics: list[str],
    differing: dict[int, int],
) -> bool:
    """Both nodes hold the values Redis holds now (``differing``: how many topics each does
    not; Redis read each time, as the other node's writes may still be landing)."""
    differing.clear()
    stored = _in_redis(redis_server, keys, topics)
    topic_filter = topics[0].rsplit("/", 1)[0] + "/#"
    for index in (1, 2):
        held = _held(nodes.port(index), f"{client_prefix}-s{index}", topic_filter, len(topics))
        count = sum(1 for topic in topics if held.get(topic) != stored[topic])
        if count:
            differing[index] = count
    return not differing


def _written(
    redis_server: RedisServer, keys: ClusterKeys, topics: list[str], values: set[bytes]
) -> bool:
    """Whether Redis holds one of ``values`` for every topic."""
    stored = _in_redis(redis_server, keys, topics)
    return len(stored) == len(topics) and set(stored.values()) <= values


def _publish_at_once(
    nodes: ClusterNodes, client_prefix: str, topics: list[str], payloads: dict[int, bytes]
) -> None:
    """Node 1 sets every topic to ``payloads[1]`` and node 2 to ``payloads[2]``, each in one
    write, at once."""
    batches = {
        index: b"".join(encode(Publish(topic, payload, 0, retain=True), 5) for topic in topics)
        + encode(Disconnect(), 5)
        for index, payload in payloads.items()
    }
    clients = {index: connected(nodes.port(index), f"{client_prefix}-p{index}") for index in (1, 2)}
    start = threading.Barrier(2)

    def publish(index: int) -> None:
        start.wait()
        clients[index].send(batches[index])

    threads = [threading.Thread(target=publish, args=(index,)) for index in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for client in clients.values():
        client.close()
