"""A drained node passes on what a late peer still routes to it for a session that moved.

Three real ``xmq serve`` nodes on a real Redis; node-3 advertises its link through a proxy
(``tests.support.link_hold``) that can hold what node-1 sends it, as a loaded node-1 whose
frames are late. A persistent QoS 1 subscriber on node-3, a publisher on node-1 (its PUBACKs
held until the subscriber's node has recorded each message, ``max_queued_writes`` 0).

While node-1's frames to node-3 are held, node-3 is drained and the subscriber takes its
session over on node-2, which announces the session's subscriptions (DSUB) to node-3. Then
node-1's held PUBLISH frames reach node-3, routed with the route node-1 had when it sent them.
Node-3 must hand them on to the session's new owner (its hand-over entries, ``MOVED_KEEP_S``):
it dropped those entries when the new owner's DSUB arrived, and node-1's PUBLISH frames were
then confirmed with nothing recorded — acknowledged to the publisher, never delivered.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes, routed, wait_for
from tests.support.http_probe import http, metric, wait_port
from tests.support.link_hold import LinkHold
from tests.support.paho_client import PahoClient, props
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

PROXY_HOST = "127.0.0.2"
EXPIRY = props(PacketTypes.CONNECT, SessionExpiryInterval=300)


@pytest.fixture
def held_nodes(redis_server: RedisServer, uid: str) -> Iterator[tuple[ClusterNodes, LinkHold]]:
    nodes = ClusterNodes(redis_server, f"latedrain-{uid}", lease_ttl_s=5.0, metrics=True)
    proxy: LinkHold | None = None
    try:
        nodes.start(1)
        nodes.start(2)
        nodes.start(3, env={"XMQ_CLUSTER__ADVERTISE_HOST": PROXY_HOST})
        nodes.wait_linked(3)
        host, port = nodes.link_address(3)
        assert host == PROXY_HOST
        proxy = LinkHold(PROXY_HOST, port, ("127.0.0.1", port), "node-1")  # 1, 2 dial 3
        metrics_3 = wait_port(nodes.nodes[3], "metrics")

        def linked() -> bool:
            return all(
                metric(metrics_3, "xmq_cluster_link_up", f'peer="{peer}"') == 1
                for peer in ("node-1", "node-2")
            )

        wait_for(linked, 15, "node-1 and node-2 linked to node-3 through the proxy")
        yield nodes, proxy
    finally:
        if proxy is not None:
            proxy.close()
        nodes.stop_all()


def test_a_drained_node_hands_on_what_a_late_peer_routed_to_it(
    held_nodes: tuple[ClusterNodes, LinkHold], uid: str
) -> None:
    nodes, proxy = held_nodes
    topic = f"{uid}/late"
    sub = PahoClient(nodes.port(3), f"{uid}-sub")
    pub = PahoClient(nodes.port(1), f"{uid}-pub")
    clients = [sub, pub]
    try:
        assert sub.connect(properties=EXPIRY).reason == 0
        sub.subscribe(topic, qos=1)
        routed(nodes.port(3), nodes.port(1), topic, sub)  # node-1 routes the topic to node-3
        pub.connect()

        sent: list[tuple[int, bytes]] = []  # (mid, payload) of every publish
        stop = threading.Event()

        def publish() -> None:
            number = 0
            while not stop.is_set():
                payload = f"m{number}".encode()
                info = pub.client.publish(topic, payload, qos=1)
                sent.append((info.mid, payload))
                number += 1
                time.sleep(0.02)

        publisher = threading.Thread(target=publish, daemon=True)
        proxy.hold()  # node-1's frames to node-3 are late from here
        publisher.start()
        wait_for(lambda: proxy.held_bytes > 0, 10, "node-1 routing to node-3")
        metrics_3 = wait_port(nodes.nodes[3], "metrics")
        status, body = http(metrics_3, "/admin/drain", method="POST")
        assert status == 202, body
        moved = _resumed(nodes.port(2), f"{uid}-sub")  # takes the session over from node-3
        clients.append(moved)
        # node-2 announced the session's subscription (DSUB) to node-3 by now
        wait_for(
            lambda: metric(metrics_3, "xmq_cluster_takeovers_total", 'kind="handed_over"') >= 1,
            10,
            "node-3 handed the session over",
        )
        time.sleep(1.0)
        proxy.release()  # node-1's PUBLISH frames reach node-3
        time.sleep(1.0)
        stop.set()
        publisher.join(5)

        acked: set[bytes] = set()
        deadline = time.monotonic() + 20
        for mid, payload in sent:
            event = pub.published.setdefault(mid, threading.Event())
            if event.wait(max(0.0, deadline - time.monotonic())) and pub.pub_reasons[mid] < 0x80:
                acked.add(payload)
        assert len(acked) >= 50, f"{len(acked)} of {len(sent)} acknowledged"

        received: set[bytes] = set()
        for client in (sub, moved):
            while not client.messages.empty():
                received.add(client.messages.get().payload)
        deadline = time.monotonic() + 15
        while not acked <= received and time.monotonic() < deadline:
            try:
                received.add(moved.messages.get(timeout=0.5).payload)
            except queue.Empty:
                continue
        missing = sorted(acked - received, key=lambda p: int(p[1:]))
        assert not missing, (
            f"{len(missing)} of {len(acked)} acknowledged messages never delivered: "
            f"{missing[:20]} (held {proxy.held_bytes} bytes)\n" + nodes.nodes[3].log()[-3000:]
        )
    finally:
        for client in clients:
            client.close()


def _resumed(port: int, client_id: str, timeout: float = 15.0) -> PahoClient:
    """The persistent session resumed on ``port`` (a new client per refused attempt)."""
    deadline = time.monotonic() + timeout
    while True:
        client = PahoClient(port, client_id)
        result = client.connect(False, properties=EXPIRY)
        if result.reason == 0:
            assert result.session_present
            return client
        client.close()
        assert time.monotonic() < deadline, f"CONNECT refused with {result.reason:#x}"
        time.sleep(0.1)


def test_a_session_moved_to_the_publisher_s_node_gets_each_message_once(
    fresh_cluster: ClusterNodes, uid: str
) -> None:
    """The old owner keeps a moved session's hand-over entries after its new owner's DSUB, and
    goes on receiving the topic (another subscriber of it stays there). The new owner's own
    publisher's messages reach the session there (a local record), and reach the old owner
    too, routed after that DSUB: handing those on would deliver each twice (QoS 2)."""
    nodes = fresh_cluster
    nodes.start_many(2)
    topic = f"{uid}/moved"
    sub = PahoClient(nodes.port(2), f"{uid}-sub")
    stay = PahoClient(nodes.port(2), f"{uid}-stay")  # keeps node-2's route of the topic
    pub = PahoClient(nodes.port(1), f"{uid}-pub")
    clients = [sub, stay, pub]
    try:
        assert sub.connect(properties=EXPIRY).reason == 0
        sub.subscribe(topic, qos=2)
        stay.connect()
        stay.subscribe(topic, qos=0)
        routed(nodes.port(2), nodes.port(1), topic, stay)
        sub.messages = queue.Queue()  # the probes
        moved = _resumed(nodes.port(1), f"{uid}-sub")  # taken over from node-2
        clients.append(moved)
        pub.connect()
        sent = [f"m{number}".encode() for number in range(40)]
        for payload in sent:
            assert pub.publish(topic, payload, qos=2) < 0x80
        stay.expect(len(sent), timeout=15)  # node-2 has read every one of them
        received: list[bytes] = []
        deadline = time.monotonic() + 3.0  # a copy handed back comes within a link round trip
        while time.monotonic() < deadline:
            try:
                received.append(moved.messages.get(timeout=0.2).payload)
            except queue.Empty:
                continue
        copies = {payload: received.count(payload) for payload in set(received)}
        twice = sorted(payload for payload, count in copies.items() if count > 1)
        assert not twice, f"{len(twice)} QoS 2 messages delivered twice: {twice[:10]}"
        assert set(received) == set(sent), sorted(set(sent) - set(received))[:10]
    finally:
        for client in clients:
            client.close()
