"""Held PUBACKs (``max_queued_writes: 0``) for the two paths beyond PUBLISH and DIRECT frames.

A message for a shared-group member on another node (SHARED frame) is acknowledged once that
node has recorded it for the member (or handed it on), or, when that node dies first, once the
member it is re-dispatched to has it. A retained message is acknowledged once its record is in
Redis: a node killed right after the PUBACK cannot lose it.
"""

from __future__ import annotations

import os
import queue
import signal
import time

from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes, routed, wait_for
from tests.support.paho_client import PahoClient, props
from tests.support.raw_client import RawClient
from tests.support.redis_server import RedisServer
from xmq.codec.packets import Puback, Publish

EXPIRY = props(PacketTypes.CONNECT, SessionExpiryInterval=3600)


def _no_packet(client: RawClient, wait_s: float) -> bool:
    try:
        client.read_packet(timeout=wait_s)
    except TimeoutError:
        return True
    return False


def _payloads(client: PahoClient, wanted: bytes, timeout: float) -> set[bytes]:
    """Messages until ``wanted`` came (or the timeout)."""
    seen: set[bytes] = set()
    deadline = time.monotonic() + timeout
    while wanted not in seen and time.monotonic() < deadline:
        try:
            seen.add(client.messages.get(timeout=0.2).payload)
        except queue.Empty:
            continue
    return seen


def test_a_shared_member_s_node_holds_the_puback_then_the_member_it_is_re_sent_to(
    redis_server: RedisServer, uid: str
) -> None:
    nodes = ClusterNodes(redis_server, f"heldshare-{uid}")
    try:
        nodes.start_many(3)
        topic = f"{uid}/work"
        shared = f"$share/g/{topic}"
        first = PahoClient(nodes.port(2), f"{uid}-first")  # the group's only member, for now
        first.connect(clean_start=True, properties=EXPIRY)
        first.subscribe(shared, 1)
        routed(nodes.port(2), nodes.port(1), topic, first)
        publisher = RawClient(nodes.port(1))
        publisher.connect(f"{uid}-pub")
        publisher.send_packet(Publish(topic, b"before", qos=1, packet_id=1))
        assert publisher.read_packet() == Puback(1)
        assert first.expect(1)[0].payload == b"before"

        os.kill(nodes.nodes[2].proc.pid, signal.SIGSTOP)  # node-2 cannot take anything now
        publisher.send_packet(Publish(topic, b"held", qos=1, packet_id=2))
        assert _no_packet(publisher, 1.0), "PUBACK before the member's node took the message"

        second = PahoClient(nodes.port(3), f"{uid}-second")  # another member, persistent
        second.connect(clean_start=True, properties=EXPIRY)
        second.subscribe(shared, 1)
        time.sleep(1.0)  # its SHARE reaches node-1
        assert _no_packet(publisher, 0.1)
        nodes.kill(2)  # node-1 re-sends what node-2 never took to the member on node-3
        assert publisher.read_packet(timeout=10) == Puback(2)
        assert b"held" in _payloads(second, b"held", timeout=10)
        publisher.close()
        second.disconnect()
        first.close()
    finally:
        if 2 in nodes.nodes:
            nodes.kill(2)
        nodes.stop_all()


def test_the_puback_of_a_retained_message_waits_for_its_redis_record(
    redis_server: RedisServer, uid: str
) -> None:
    nodes = ClusterNodes(redis_server, f"heldret-{uid}", lease_ttl_s=10.0)
    try:
        nodes.start_many(1)
        topic = f"{uid}/state"
        publisher = RawClient(nodes.port(1))
        publisher.connect(f"{uid}-pub")
        redis_server.pause()
        try:
            publisher.send_packet(Publish(topic, b"kept", qos=1, retain=True, packet_id=1))
            assert _no_packet(publisher, 1.0), "PUBACK before the retained record is in Redis"
        finally:
            redis_server.resume()
        acked = publisher.read_packet(timeout=10)
        assert isinstance(acked, Puback)
        assert acked.packet_id == 1
        nodes.kill(1)  # right after the PUBACK
        publisher.close()

        client = redis_server.client()
        try:
            stored = f"xmq:v1:{{heldret-{uid}}}:retained:msg:{topic}"
            wait_for(lambda: client.exists(stored) == 1, timeout=1.0, what="retained record")
        finally:
            client.close()
        nodes.start(2)
        nodes.wait_linked(1)
        reader = PahoClient(nodes.port(2), f"{uid}-reader")
        reader.connect()
        reader.subscribe(topic, 1)
        received = reader.expect(1)[0]
        assert received.payload == b"kept"
        assert received.retain
        reader.disconnect()
    finally:
        nodes.stop_all()
