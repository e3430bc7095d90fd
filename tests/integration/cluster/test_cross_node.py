"""Three real nodes behave as one broker: delivery across every pair, shared groups, takeover."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes, routed
from tests.support.paho_client import PahoClient, props
from tests.support.redis_server import RedisServer
from xmq.contract import SessionOwner

PAIRS = list(itertools.permutations((1, 2, 3), 2))


@pytest.mark.parametrize(("sub_node", "pub_node"), PAIRS, ids=[f"{a}<-{b}" for a, b in PAIRS])
def test_delivery_across_every_pair(
    three_nodes: ClusterNodes, uid: str, sub_node: int, pub_node: int
) -> None:
    topic = f"{uid}/pair"
    sub = PahoClient(three_nodes.port(sub_node), f"{uid}-s")
    sub.connect()
    sub.subscribe(f"{uid}/#", 1)
    routed(three_nodes.port(sub_node), three_nodes.port(pub_node), f"{uid}/probe", sub)
    pub = PahoClient(three_nodes.port(pub_node), f"{uid}-p")
    pub.connect()
    try:
        for n in range(50):
            pub.publish(topic, f"{n}", qos=1, wait=False)
        got = sub.expect(50)
        assert [m.payload for m in got] == [str(n).encode() for n in range(50)]
        sub.expect_none(0.3)
    finally:
        pub.disconnect()
        sub.disconnect()


def test_one_copy_per_node_however_many_subscribers(three_nodes: ClusterNodes, uid: str) -> None:
    """Ten subscribers on node 2 and one on node 3: each gets every message exactly once."""
    subs = []
    for n in range(10):
        client = PahoClient(three_nodes.port(2), f"{uid}-s{n}")
        client.connect()
        client.subscribe(f"{uid}/fan", 1)
        subs.append(client)
    far = PahoClient(three_nodes.port(3), f"{uid}-far")
    far.connect()
    far.subscribe(f"{uid}/fan", 0)
    routed(three_nodes.port(2), three_nodes.port(1), f"{uid}/fan", subs[-1])
    routed(three_nodes.port(3), three_nodes.port(1), f"{uid}/fan", far)
    time.sleep(0.3)
    for client in [*subs, far]:  # drop the probes the routing checks sent
        while not client.messages.empty():
            client.messages.get()
    pub = PahoClient(three_nodes.port(1), f"{uid}-p")
    pub.connect()
    try:
        for n in range(20):
            pub.publish(f"{uid}/fan", f"{n}", qos=1)
        for client in [*subs, far]:
            got = client.expect(20)
            assert sorted(int(m.payload) for m in got) == list(range(20))
            client.expect_none(0.2)
    finally:
        pub.disconnect()
        for client in [*subs, far]:
            client.disconnect()


def test_shared_subscription_exactly_once_across_nodes(three_nodes: ClusterNodes, uid: str) -> None:
    members = []
    for node in (2, 3):
        client = PahoClient(three_nodes.port(node), f"{uid}-m{node}")
        client.connect()
        client.subscribe(f"$share/g{uid}/{uid}/work", 1)
        members.append(client)
    time.sleep(1.0)  # shared-group routes spread over the links
    pub = PahoClient(three_nodes.port(1), f"{uid}-p")
    pub.connect()
    try:
        total = 200
        for n in range(total):
            pub.publish(f"{uid}/work", f"{n}", qos=1, wait=False)
        seen: list[int] = []
        deadline = time.monotonic() + 15
        while len(seen) < total and time.monotonic() < deadline:
            for client in members:
                while not client.messages.empty():
                    seen.append(int(client.messages.get().payload))
            time.sleep(0.05)
        assert sorted(seen) == list(range(total))  # every message once, none twice
        for client in members:
            client.expect_none(0.3)
    finally:
        pub.disconnect()
        for client in members:
            client.disconnect()


def test_takeover_across_nodes(three_nodes: ClusterNodes, uid: str) -> None:
    first = PahoClient(three_nodes.port(1), f"{uid}-c")
    first.connect(properties=props(PacketTypes.CONNECT, SessionExpiryInterval=300))
    first.subscribe(f"{uid}/t", 1)
    second = PahoClient(three_nodes.port(2), f"{uid}-c")
    try:
        result = second.connect(
            clean_start=False, properties=props(PacketTypes.CONNECT, SessionExpiryInterval=300)
        )
        assert result.reason == 0
        assert result.session_present
        gone = first.disconnects.get(timeout=5)
        assert gone.reason == 0x8E
        pub = PahoClient(three_nodes.port(3), f"{uid}-p")
        pub.connect()
        routed(three_nodes.port(2), three_nodes.port(3), f"{uid}/t", second)
        pub.publish(f"{uid}/t", b"after", qos=1)
        assert second.expect(1)[0].payload == b"after"
        pub.disconnect()
    finally:
        first.close()
        second.disconnect()


def test_concurrent_connects_leave_one_owner(
    three_nodes: ClusterNodes, redis_server: RedisServer, uid: str
) -> None:
    client_id = f"{uid}-dup"
    clients = [PahoClient(three_nodes.port(node), client_id) for node in (1, 2)]
    results: list[int] = []

    def connect(client: PahoClient) -> None:
        results.append(client.connect().reason)

    threads = [threading.Thread(target=connect, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    time.sleep(1.0)
    assert results == [0, 0]  # both accepted, then the later one took the session over
    kicked = [c for c in clients if not c.disconnects.empty()]
    assert len(kicked) == 1
    assert kicked[0].disconnects.get().reason == 0x8E
    connected = [c for c in clients if c is not kicked[0]]
    redis = redis_server.client()
    try:
        owner = redis.get(f"xmq:v1:{{three}}:session:owner:{client_id}")
    finally:
        redis.close()
    assert isinstance(owner, bytes)
    record = SessionOwner.from_json(owner)
    owner_node = int(record.node_id.removeprefix("node-"))
    assert connected[0].port == three_nodes.port(owner_node)
    for client in clients:
        client.close()


def test_takeover_while_messages_flow_loses_nothing(three_nodes: ClusterNodes, uid: str) -> None:
    """A persistent session moves from node 1 to node 2 while node 3 publishes to it."""
    topic = f"{uid}/flow"
    expiry = props(PacketTypes.CONNECT, SessionExpiryInterval=300)
    first = PahoClient(three_nodes.port(1), f"{uid}-c")
    first.connect(properties=expiry)
    first.subscribe(topic, 1)
    routed(three_nodes.port(1), three_nodes.port(3), topic, first)
    total = 1500
    pub = PahoClient(three_nodes.port(3), f"{uid}-p")
    pub.connect()

    def publish_all() -> None:
        for n in range(total):
            pub.publish(topic, f"{n}", qos=1, wait=n % 100 == 99, timeout=30)

    publisher = threading.Thread(target=publish_all)
    publisher.start()
    time.sleep(0.3)
    second = PahoClient(three_nodes.port(2), f"{uid}-c")
    try:
        assert second.connect(clean_start=False, properties=expiry).session_present
        publisher.join(60)
        seen: set[int] = set()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(seen) < total:
            for client in (first, second):
                while not client.messages.empty():
                    payload = client.messages.get().payload
                    if payload != b"probe":
                        seen.add(int(payload))
            time.sleep(0.05)
        assert set(range(total)) - seen == set()
    finally:
        pub.disconnect()
        first.close()
        second.disconnect()


def test_shared_group_survives_a_member_node_killed_mid_stream(
    fresh_cluster: ClusterNodes, uid: str
) -> None:
    nodes = fresh_cluster
    nodes.start_many(3)
    group = f"$share/g{uid}/{uid}/jobs"
    members = {}
    for node in (2, 3):
        client = PahoClient(nodes.port(node), f"{uid}-m{node}")
        client.connect()
        client.subscribe(group, 1)
        members[node] = client
    time.sleep(1.0)
    pub = PahoClient(nodes.port(1), f"{uid}-p")
    pub.connect()
    total = 3000
    try:
        for n in range(total):
            pub.publish(f"{uid}/jobs", f"{n}", qos=1, wait=n % 250 == 249, timeout=30)
            if n == total // 2:
                nodes.kill(3)
        seen: list[int] = []
        deadline = time.monotonic() + 15
        survivor = members[2]
        while time.monotonic() < deadline and len(set(seen)) < total:
            for client in members.values():
                while not client.messages.empty():
                    seen.append(int(client.messages.get().payload))
            time.sleep(0.05)
        # Messages node 3's member had not acknowledged when the node died are re-sent to the
        # member on node 2: none is lost. Those the member acknowledged just before the kill,
        # while the acknowledgement was still on its way back, come twice (QoS 1 allows it).
        assert set(range(total)) - set(seen) == set()
        assert len(seen) - len(set(seen)) <= 50  # measured: 0-10
        assert survivor.messages.empty()
    finally:
        pub.disconnect()
        for client in members.values():
            client.close()
