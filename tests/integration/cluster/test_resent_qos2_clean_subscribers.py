"""A re-sent QoS 2 PUBLISH routed again on another node reaches no subscriber twice.

Two real nodes (``max_queued_writes: 0``), a clean QoS 2 subscriber on each, and a persistent
QoS 2 subscriber. A persistent publisher sends a QoS 2 PUBLISH to node 1 and has its PUBREC;
its connection then drops before its PUBREL (as when the PUBREC was lost with it), and it
resumes its session on node 2 and sends the PUBLISH again (DUP), as MQTT asks of a sender
without a PUBREC. Node 2's claim read the packet id back from Redis, so node 2 routes the
message once more (``InboundMessageIds.route_again``: it cannot know which records of the first
routing were written). The persistent subscriber's record ignores the second copy (its
``session:seen`` marker); the clean subscribers got a second QoS 2 delivery before
(``core.routed_inbound_ids`` now keeps it from them).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster_nodes import LEASE_TTL_S, node_yaml, wait_for_lease
from tests.support.raw_client import RawClient
from tests.support.redis_server import RedisServer
from xmq.codec.packets import (
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    SubscriptionRequest,
)
from xmq.codec.properties import Properties

pytestmark = pytest.mark.integration


class Subscriber:
    """A raw QoS 2 subscriber that completes every exchange and keeps what it was given."""

    def __init__(self, port: int, client_id: str, topic: str, persistent: bool) -> None:
        self.client = RawClient(port)
        props = Properties()
        if persistent:
            props.session_expiry_interval = 3600
        ack = self.client.connect(client_id, properties=props)
        assert ack.reason_code == 0, ack
        self.client.send_packet(Subscribe(1, [SubscriptionRequest(topic, 2)]))
        suback = self.client.read_packet()
        assert isinstance(suback, Suback) and suback.reason_codes == [2], suback
        self.payloads: list[bytes] = []

    def read(self, seconds: float) -> list[bytes]:
        """Read for ``seconds``; the payloads received (every delivery, warm-ups included)."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                packet = self.client.read_packet(remaining)
            except TimeoutError:
                break
            assert packet is not None, "the broker closed a subscriber"
            if isinstance(packet, Publish):
                self.payloads.append(packet.payload)
                if packet.qos == 2:
                    self.client.send_packet(Pubrec(packet.packet_id))
                elif packet.qos == 1:
                    self.client.send_packet(Puback(packet.packet_id))
            elif isinstance(packet, Pubrel):
                self.client.send_packet(Pubcomp(packet.packet_id))
        return self.payloads


class Setup:
    def __init__(self, redis_server: RedisServer, uid: str) -> None:
        self.redis = redis_server
        self.cluster = f"resent-{uid}"
        self.topic = f"{uid}/cmd"
        self.uid = uid
        self.nodes = [self._start("node-1"), self._start("node-2")]
        self.clients: list[RawClient] = []

    def _start(self, node_id: str) -> BrokerProcess:
        process = BrokerProcess(
            node_yaml(self.redis.url, self.cluster, LEASE_TTL_S, 0), env={"XMQ_NODE_ID": node_id}
        )
        wait_for_lease(self.redis, self.cluster, node_id)
        return process

    def publisher(self, node: int, clean_start: bool) -> RawClient:
        client = RawClient(self.nodes[node].port)
        self.clients.append(client)
        props = Properties()
        props.session_expiry_interval = 3600
        ack = client.connect(f"{self.uid}-pub", clean_start=clean_start, properties=props)
        assert ack.reason_code == 0, ack
        assert ack.session_present != clean_start, ack
        return client

    def warm(self, subscribers: list[Subscriber]) -> None:
        """Publish QoS 0 from each node until every subscriber hears both: routes are up."""
        warmers = [RawClient(node.port) for node in self.nodes]
        self.clients.extend(warmers)
        for index, warmer in enumerate(warmers):
            warmer.connect(f"{self.uid}-warm-{index}")
        deadline = time.monotonic() + 15
        for warmer in warmers:
            for subscriber in subscribers:
                while not subscriber.read(0.1):
                    assert time.monotonic() < deadline, "no route between the nodes"
                    warmer.send_packet(Publish(self.topic, b"warm", qos=0))
                subscriber.payloads.clear()
        time.sleep(0.3)
        for subscriber in subscribers:
            subscriber.read(0.2)
            subscriber.payloads.clear()

    def close(self) -> None:
        for client in self.clients:
            client.close()
        for process in self.nodes:
            process.stop()


@pytest.fixture
def setup(redis_server: RedisServer, uid: str) -> Iterator[Setup]:
    with closing(Setup(redis_server, uid)) as started:
        yield started


def _until(client: RawClient, wanted: object) -> None:
    seen: list[object] = []
    while wanted not in seen:
        packet = client.read_packet(10)
        assert packet is not None, seen
        seen.append(packet)


def test_a_resent_qos2_publish_reaches_each_subscriber_once(setup: Setup) -> None:
    topic = setup.topic
    subscribers = [
        Subscriber(setup.nodes[0].port, f"{setup.uid}-clean-1", topic, persistent=False),
        Subscriber(setup.nodes[1].port, f"{setup.uid}-clean-2", topic, persistent=False),
        Subscriber(setup.nodes[1].port, f"{setup.uid}-kept-2", topic, persistent=True),
    ]
    setup.clients.extend(s.client for s in subscribers)
    setup.warm(subscribers)

    publisher = setup.publisher(0, clean_start=True)
    publisher.send_packet(Publish(topic, b"command", qos=2, packet_id=7))
    _until(publisher, Pubrec(7))  # routed on node 1; its id recorded in Redis
    for subscriber in subscribers:
        assert subscriber.read(1.0) == [b"command"]
    publisher.close()  # gone before its PUBREL: the PUBREC counts as lost

    publisher = setup.publisher(1, clean_start=False)
    publisher.send_packet(Publish(topic, b"command", qos=2, dup=True, packet_id=7))
    _until(publisher, Pubrec(7))
    publisher.send_packet(Pubrel(7))
    _until(publisher, Pubcomp(7))

    received = [subscriber.read(1.5) for subscriber in subscribers]
    assert received == [[b"command"]] * 3, "a QoS 2 message delivered twice"
