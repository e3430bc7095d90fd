"""A publisher's PUBACK never runs ahead of the durable record of its message.

With ``max_queued_writes: 0`` a QoS 1 message for a persistent session is in Redis before it
is delivered; the publisher's PUBACK now means the same: it goes out once the subscriber's
node has confirmed the record (PUBLISH_ACK), or, when that node dies first, once the
publishing node has appended the message to the session's Redis queue.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time

from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes, routed
from tests.support.paho_client import PahoClient, props
from tests.support.raw_client import RawClient
from tests.support.redis_server import RedisServer
from xmq.codec.packets import Puback, Publish

EXPIRY = props(PacketTypes.CONNECT, SessionExpiryInterval=3600)


def _payloads(client: PahoClient, quiet_s: float, timeout: float) -> set[bytes]:
    """Messages until none came for ``quiet_s``."""
    seen: set[bytes] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            seen.add(client.messages.get(timeout=quiet_s).payload)
        except queue.Empty:
            return seen
    return seen


def _persistent_subscriber_on_2_publisher_on_1(
    nodes: ClusterNodes, uid: str, topic: str
) -> tuple[PahoClient, RawClient]:
    nodes.start_many(2)
    subscriber = PahoClient(nodes.port(2), f"{uid}-persistent")
    subscriber.connect(clean_start=True, properties=EXPIRY)
    subscriber.subscribe(topic, 1)
    routed(nodes.port(2), nodes.port(1), topic, subscriber)
    publisher = RawClient(nodes.port(1))
    publisher.connect(f"{uid}-pub")
    return subscriber, publisher


def _resumed_on_1(nodes: ClusterNodes, uid: str) -> set[bytes]:
    """Node-2's persistent session, claimed on node-1: what it gets within a quiet second."""
    again = PahoClient(nodes.port(1), f"{uid}-persistent")
    result = again.connect(clean_start=False, properties=EXPIRY, timeout=15)
    assert result.reason == 0
    assert result.session_present
    got = _payloads(again, quiet_s=1.0, timeout=10)
    again.disconnect()
    return got


def test_the_puback_waits_for_the_subscriber_node_then_for_the_append_after_its_kill(
    redis_server: RedisServer, uid: str
) -> None:
    nodes = ClusterNodes(redis_server, f"held-{uid}")
    try:
        topic = f"{uid}/held"
        subscriber, publisher = _persistent_subscriber_on_2_publisher_on_1(nodes, uid, topic)
        publisher.send_packet(Publish(topic, b"before", qos=1, packet_id=1))
        assert publisher.read_packet() == Puback(1)  # node-2 answers: acknowledged
        assert subscriber.expect(1)[0].payload == b"before"

        os.kill(nodes.nodes[2].proc.pid, signal.SIGSTOP)  # node-2 cannot confirm any more
        publisher.send_packet(Publish(topic, b"held", qos=1, packet_id=2))
        try:
            early = publisher.read_packet(timeout=1.0)
        except TimeoutError:
            early = None
        assert early is None, "PUBACK before the subscriber's node recorded the message"
        nodes.kill(2)  # node-1 appends what node-2 never confirmed to the session's queue
        assert publisher.read_packet(timeout=10) == Puback(2)
        subscriber.close()
        assert b"held" in _resumed_on_1(nodes, uid)  # claims the dead node's session
        publisher.close()
    finally:
        if 2 in nodes.nodes:
            nodes.kill(2)
        nodes.stop_all()


def test_a_publisher_node_killed_right_after_its_pubacks_loses_nothing_acknowledged(
    redis_server: RedisServer, uid: str
) -> None:
    nodes = ClusterNodes(redis_server, f"killpub-{uid}")
    try:
        nodes.start_many(2)
        topic = f"{uid}/stream"
        remote = PahoClient(nodes.port(2), f"{uid}-remote")  # on the other node
        remote.connect(clean_start=True, properties=EXPIRY)
        remote.subscribe(topic, 1)
        local_id = f"{uid}-local"
        local = PahoClient(nodes.port(1), local_id)  # on the publisher's node
        local.connect(clean_start=True, properties=EXPIRY)
        local.subscribe(topic, 1)
        routed(nodes.port(2), nodes.port(1), topic, remote)
        local.messages = queue.Queue()  # forget the probes
        publisher = PahoClient(nodes.port(1), f"{uid}-pub")
        publisher.connect()
        numbers: dict[int, bytes] = {}
        stop = threading.Event()

        def stream() -> None:
            for n in range(20_000):
                if stop.is_set():
                    return
                payload = f"{n}".encode()
                numbers[publisher.client.publish(topic, payload, qos=1).mid] = payload
                time.sleep(0.0005)

        thread = threading.Thread(target=stream, daemon=True)
        thread.start()
        deadline = time.monotonic() + 15
        while len(publisher.published) < 300 and time.monotonic() < deadline:
            time.sleep(0.001)
        nodes.kill(1)  # kill -9 right after a PUBACK
        stop.set()
        thread.join(5)
        acknowledged = {
            numbers[mid] for mid, event in list(publisher.published.items()) if event.is_set()
        }
        assert len(acknowledged) >= 300
        publisher.close()

        got_remote = _payloads(remote, quiet_s=2.0, timeout=20)
        assert acknowledged - got_remote == set()
        got_local = _payloads(local, quiet_s=0.2, timeout=5)
        local.close()
        again = PahoClient(nodes.port(2), local_id)  # the killed node's session, from Redis
        result = again.connect(clean_start=False, properties=EXPIRY, timeout=15)
        assert result.session_present
        got_local |= _payloads(again, quiet_s=2.0, timeout=20)
        assert acknowledged - got_local == set()
        again.disconnect()
        remote.disconnect()
    finally:
        nodes.stop_all()


def test_a_paused_subscriber_node_loses_its_link_with_its_lease_and_the_puback_goes(
    redis_server: RedisServer, uid: str
) -> None:
    nodes = ClusterNodes(redis_server, f"paused-{uid}")
    try:
        topic = f"{uid}/paused"
        subscriber, publisher = _persistent_subscriber_on_2_publisher_on_1(nodes, uid, topic)
        os.kill(nodes.nodes[2].proc.pid, signal.SIGSTOP)  # alive for TCP, silent otherwise
        paused_at = time.monotonic()
        publisher.send_packet(Publish(topic, b"held", qos=1, packet_id=1))
        # node-2's lease (2 s) runs out; node-1 closes its link and appends the message to the
        # session's Redis queue, which releases the PUBACK (before: held until the link closed)
        assert publisher.read_packet(timeout=15) == Puback(1)
        assert time.monotonic() - paused_at >= nodes.lease_ttl_s * 0.9
        subscriber.close()
        nodes.kill(2)
        assert b"held" in _resumed_on_1(nodes, uid)
        publisher.close()
    finally:
        if 2 in nodes.nodes:
            nodes.kill(2)
        nodes.stop_all()
