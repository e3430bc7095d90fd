"""Exactly-once QoS 2 to a persistent session across a kill -9 of its node, real brokers.

Node 1 reaches Redis through a gate (``tests/support/redis_gate.py``) that stalls its Redis
connection at the ``HSET session:inflight`` of a QoS 2 delivery: the packet id of a PUBLISH
(``<id>``), or the PUBREC state that a PUBREL stands for (``<id>:r``). Node 1 is killed (SIGKILL)
while that write is held, so it never reaches Redis, and the subscriber resumes its session on
node 2. The subscriber is a raw client acting as an MQTT QoS 2 receiver (the spec's method B:
it hands a message to its application when it comes under a packet id the client does not
hold, and forgets the id on PUBREL): its application must get the message exactly once. Before
the fix node 1 wrote the PUBLISH (the PUBREL) before Redis had its state, and node 2 sent the
message to the client again as a new one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import closing

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.cluster_nodes import LEASE_TTL_S, clear_dead_lease, node_yaml, wait_for_lease
from tests.support.paho_client import PahoClient
from tests.support.raw_client import RawClient
from tests.support.redis_gate import RedisGate
from tests.support.redis_server import RedisServer
from xmq.codec.packets import (
    Packet,
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

_HSET_INFLIGHT = rb"\$4\r\nHSET\r\n\$\d+\r\n[^\r]*session:inflight:[^\r]*\r\n\$\d+\r\n[^\r]*\r\n"
STORED_ID = _HSET_INFLIGHT + rb"\$\d+\r\n\d+\r\n"  # a QoS 2 PUBLISH's packet id
STORED_PUBREC = _HSET_INFLIGHT + rb"\$\d+\r\n\d+:r\r\n"  # PUBREC received, PUBREL owed


class Receiver:
    """A persistent MQTT 5 QoS 2 receiver whose state outlives its connections."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.raw: RawClient | None = None
        self.held: set[int] = set()  # QoS 2 ids received, PUBREL not yet
        self.delivered: list[bytes] = []  # what the application got
        self.publishes: list[tuple[int, bool, bytes]] = []  # QoS 2 PUBLISH: id, DUP, payload
        self.qos1_ids: list[int] = []

    def attach(self, port: int, clean_start: bool) -> bool:
        if self.raw is not None:
            self.raw.close()
        self.raw = RawClient(port)
        props = Properties()
        props.session_expiry_interval = 3600
        return self.raw.connect(
            self.client_id, clean_start=clean_start, properties=props
        ).session_present

    def send(self, packet: Packet) -> None:
        assert self.raw is not None
        self.raw.send_packet(packet)

    def take(self, packet: Packet, pubrec: bool) -> None:
        if isinstance(packet, Publish) and packet.qos == 2:
            self.publishes.append((packet.packet_id, packet.dup, packet.payload))
            if packet.packet_id not in self.held:
                self.held.add(packet.packet_id)
                self.delivered.append(packet.payload)
            if pubrec:
                self.send(Pubrec(packet.packet_id))
        elif isinstance(packet, Publish) and packet.qos == 1:
            self.qos1_ids.append(packet.packet_id)
            self.send(Puback(packet.packet_id))
        elif isinstance(packet, Pubrel):
            self.held.discard(packet.packet_id)
            self.send(Pubcomp(packet.packet_id))

    def run(
        self, seconds: float, pubrec: bool = True, until: Callable[[], bool] | None = None
    ) -> list[Packet]:
        """Read and answer packets for ``seconds``, or until ``until()`` holds (no PUBREC when
        ``pubrec`` is False)."""
        assert self.raw is not None
        got: list[Packet] = []
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0 and not (until and until()):
            try:
                packet = self.raw.read_packet(remaining)
            except TimeoutError:
                break
            if packet is None:
                break
            got.append(packet)
            self.take(packet, pubrec)
        return got

    def completed(self) -> bool:
        """The application has a message and no QoS 2 exchange is open."""
        return bool(self.delivered) and not self.held

    def close(self) -> None:
        if self.raw is not None:
            self.raw.close()


class Setup:
    """Node 1 (its Redis through the gate, where the subscriber starts) and node 2."""

    def __init__(self, redis_server: RedisServer, uid: str) -> None:
        self.redis = redis_server
        self.cluster = f"q2-{uid}"
        self.topic = f"{uid}/t"
        self.gate = RedisGate(redis_server.host, redis_server.port)
        self.nodes: list[BrokerProcess] = []
        self.node_1 = self._start(self.gate.url, "node-1")
        self.node_2 = self._start(redis_server.url, "node-2")
        self.receiver = Receiver(f"{uid}-sub")

    def _start(self, url: str, node_id: str) -> BrokerProcess:
        yaml = node_yaml(url, self.cluster, LEASE_TTL_S, 0)
        process = BrokerProcess(yaml, env={"XMQ_NODE_ID": node_id})
        self.nodes.append(process)
        wait_for_lease(self.redis, self.cluster, node_id)
        return process

    def subscribe_on_node_1(self) -> None:
        """The persistent session on node 1; three QoS 1 messages move its packet ids on
        (node 2 starts at 1: a message it sent as new would come under another id)."""
        receiver = self.receiver
        assert not receiver.attach(self.node_1.port, clean_start=True)
        receiver.send(Subscribe(1, [SubscriptionRequest(self.topic, 2)]))
        assert receiver.raw is not None
        assert isinstance(receiver.raw.read_packet(), Suback)
        for n in range(3):
            self.publish(f"warm-{n}".encode(), qos=1)
        receiver.run(10, until=lambda: len(receiver.qos1_ids) == 3)
        assert receiver.qos1_ids == [1, 2, 3]

    def publish(self, payload: bytes, qos: int = 2) -> None:
        publisher = PahoClient(self.node_1.port, "")
        publisher.connect()
        try:
            publisher.publish(self.topic, payload, qos=qos, wait=True)
        finally:
            publisher.disconnect()

    def kill_node_1(self) -> None:
        """SIGKILL, and what the operator does for a dead pod: its lease goes at once."""
        self.nodes[0].kill()
        clear_dead_lease(self.redis, self.cluster, "node-1")

    def close(self) -> None:
        self.receiver.close()
        for process in self.nodes:
            process.stop()
        self.gate.close()


@pytest.fixture
def setup(redis_server: RedisServer, uid: str) -> Iterator[Setup]:
    with closing(Setup(redis_server, uid)) as started:
        yield started


def test_a_publish_does_not_reach_the_client_before_its_packet_id(setup: Setup) -> None:
    setup.subscribe_on_node_1()
    receiver = setup.receiver
    setup.gate.hold(STORED_ID)
    setup.publish(b"once")  # recorded (RPUSH answered): the publisher has its PUBREC
    assert setup.gate.held.wait(10)  # node 1 is writing its packet id: Redis does not answer
    receiver.run(0.5, pubrec=False)  # the kill comes before the client could answer
    setup.kill_node_1()
    assert receiver.attach(setup.node_2.port, clean_start=False)
    receiver.run(10, until=receiver.completed)
    receiver.run(0.5)  # a second copy would come right behind
    assert receiver.delivered == [b"once"], receiver.publishes
    assert not receiver.held  # completed with node 2


def test_a_pubrel_does_not_reach_the_client_before_the_pubrec_state(setup: Setup) -> None:
    setup.subscribe_on_node_1()
    receiver = setup.receiver
    setup.publish(b"once")
    receiver.run(10, pubrec=False, until=lambda: bool(receiver.publishes))
    assert receiver.publishes == [(4, False, b"once")]  # in the client's hands
    setup.gate.hold(STORED_PUBREC)
    receiver.send(Pubrec(4))
    assert setup.gate.held.wait(10)  # node 1 is writing "4:r": Redis does not answer
    receiver.run(0.5)  # a PUBREL now would be answered (PUBCOMP): the client forgets the id
    setup.kill_node_1()
    assert receiver.attach(setup.node_2.port, clean_start=False)
    receiver.run(10, until=receiver.completed)
    receiver.run(0.5)
    assert receiver.delivered == [b"once"], receiver.publishes
    # node 2 re-sent it under its packet id marked DUP, then the PUBREL; the client completed it
    assert receiver.publishes == [(4, False, b"once"), (4, True, b"once")]
    assert not receiver.held
