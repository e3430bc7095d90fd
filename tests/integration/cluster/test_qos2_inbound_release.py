"""Exactly-once for inbound QoS 2 (client to broker) across a kill -9, real brokers.

The publisher's persistent session is on node 1, which reaches Redis through a gate
(``tests/support/redis_gate.py``) that stalls its Redis connection at the
``SREM session:qos2in`` of a PUBREL. Node 1 is killed (SIGKILL) while that removal is held, so
the packet id stays recorded, and the publisher resumes its session on node 2. The publisher is
a raw client acting as a conforming MQTT sender: with a PUBCOMP it considers the id free and
reuses it at once for a new message; without one it re-sends its PUBREL first. The new message
must reach the subscriber (on node 2). Before the fix node 1 sent the PUBCOMP before the
``SREM`` was written: node 2, still holding the id, took the new message for a re-send of the
old one (PUBREC, not routed) and the subscriber never got it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster_nodes import LEASE_TTL_S, clear_dead_lease, node_yaml, wait_for_lease
from tests.support.raw_client import RawClient
from tests.support.redis_gate import RedisGate
from tests.support.redis_server import RedisServer
from xmq.codec.packets import (
    Packet,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    SubscriptionRequest,
)
from xmq.codec.properties import Properties
from xmq.contract.session_scripts import RELEASE_INBOUND_ID
from xmq.store.redis_batcher import script_sha

SREM_INBOUND = (
    rb"\$7\r\nEVALSHA\r\n\$40\r\n"
    + script_sha(RELEASE_INBOUND_ID).encode()
    + rb"\r\n\$1\r\n[23]\r\n\$\d+\r\n[^\r]*session:qos2in:[^\r]*\r\n"
)
"""The release of an inbound QoS 2 id (``RELEASE_INBOUND_ID``: its ``SREM`` and generation;
3 keys: with the released message's marker index)."""


def _read(client: RawClient, seconds: float) -> list[Packet]:
    """Every packet that arrives within ``seconds``."""
    got: list[Packet] = []
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            packet = client.read_packet(remaining)
        except TimeoutError:
            break
        if packet is None:
            break
        got.append(packet)
    return got


def _read_until(client: RawClient, wanted: Packet) -> list[Packet]:
    got: list[Packet] = []
    while wanted not in got:
        packet = client.read_packet(10)
        assert packet is not None, got
        got.append(packet)
    return got


class Setup:
    """Node 1 (its Redis through the gate, where the publisher starts) and node 2 (the
    subscriber's)."""

    def __init__(self, redis_server: RedisServer, uid: str) -> None:
        self.redis = redis_server
        self.cluster = f"q2in-{uid}"
        self.topic = f"{uid}/t"
        self.client_id = f"{uid}-pub"
        self.gate = RedisGate(redis_server.host, redis_server.port)
        self.nodes: list[BrokerProcess] = []
        self.clients: list[RawClient] = []
        self.node_1 = self._start(self.gate.url, "node-1")
        self.node_2 = self._start(redis_server.url, "node-2")

    def _start(self, url: str, node_id: str) -> BrokerProcess:
        process = BrokerProcess(
            node_yaml(url, self.cluster, LEASE_TTL_S, 0), env={"XMQ_NODE_ID": node_id}
        )
        self.nodes.append(process)
        wait_for_lease(self.redis, self.cluster, node_id)
        return process

    def client(self, port: int) -> RawClient:
        client = RawClient(port)
        self.clients.append(client)
        return client

    def publisher(self, port: int, clean_start: bool) -> tuple[RawClient, bool]:
        """The persistent publisher's connection and its session-present flag."""
        client = self.client(port)
        props = Properties()
        props.session_expiry_interval = 3600
        present = client.connect(self.client_id, clean_start=clean_start, properties=props)
        return client, present.session_present

    def subscriber(self) -> RawClient:
        """A clean QoS 1 subscriber on node 2, once node 1 routes to it."""
        subscriber = self.client(self.node_2.port)
        subscriber.connect(f"{self.client_id}-sub")
        subscriber.send_packet(Subscribe(1, [SubscriptionRequest(self.topic, 1)]))
        assert isinstance(subscriber.read_packet(), Suback)
        warm = self.client(self.node_1.port)
        warm.connect(f"{self.client_id}-warm")
        deadline = time.monotonic() + 10
        while not any(isinstance(p, Publish) for p in _read(subscriber, 0.1)):
            assert time.monotonic() < deadline, "node 1 has no route to node 2"
            warm.send_packet(Publish(self.topic, b"warm", qos=0))
        _read(subscriber, 0.3)
        return subscriber

    def kill_node_1(self) -> None:
        """SIGKILL, and what the operator does for a dead pod: its lease goes at once."""
        self.nodes[0].kill()
        clear_dead_lease(self.redis, self.cluster, "node-1")

    def close(self) -> None:
        for client in self.clients:
            client.close()
        for process in self.nodes:
            process.stop()
        self.gate.close()


@pytest.fixture
def setup(redis_server: RedisServer, uid: str) -> Iterator[Setup]:
    with closing(Setup(redis_server, uid)) as started:
        yield started


def _payloads(packets: list[Packet]) -> list[bytes]:
    return [p.payload for p in packets if isinstance(p, Publish)]


def test_a_reused_packet_id_after_a_kill_is_a_new_message(setup: Setup) -> None:
    subscriber = setup.subscriber()
    publisher, _ = setup.publisher(setup.node_1.port, clean_start=True)
    publisher.send_packet(Publish(setup.topic, b"old", qos=2, packet_id=7))
    _read_until(publisher, Pubrec(7))  # routed, its id recorded in Redis
    assert _payloads(_read(subscriber, 1)) == [b"old"]
    setup.gate.hold(SREM_INBOUND)
    publisher.send_packet(Pubrel(7))
    assert setup.gate.held.wait(10)  # node 1 is removing 7: Redis does not answer
    completed_on_node_1 = Pubcomp(7) in _read(publisher, 0.5)
    setup.kill_node_1()

    publisher, present = setup.publisher(setup.node_2.port, clean_start=False)
    assert present
    if not completed_on_node_1:  # a conforming client re-sends its PUBREL first
        publisher.send_packet(Pubrel(7))
        _read_until(publisher, Pubcomp(7))
    # the id is free for the client: it reuses it at once for a new message
    publisher.send_packet(Publish(setup.topic, b"new", qos=2, packet_id=7))
    _read_until(publisher, Pubrec(7))
    publisher.send_packet(Pubrel(7))
    _read_until(publisher, Pubcomp(7))
    assert _payloads(_read(subscriber, 1)) == [b"new"]  # routed, not taken for a re-send
    assert not completed_on_node_1  # no PUBCOMP before Redis had removed the id
