"""A held acknowledgement (``max_queued_writes: 0``) whose only delivery, on another node, was
dropped for a quota says 0x97 Quota exceeded, as on one node: the remote node's PUBLISH_ACK
carries the reason for that frame. Two real nodes, real Redis."""

from __future__ import annotations

import contextlib
import time

import pytest

from tests.support.cluster_nodes import ClusterNodes
from tests.support.raw_client import RawClient, connected, subscribed
from tests.support.redis_server import RedisServer
from xmq.codec.packets import Disconnect, Puback, Publish, Pubrec
from xmq.codec.properties import Properties

pytestmark = pytest.mark.integration

QUOTA_EXCEEDED = 0x97


def _offline_subscriber_on_2(nodes: ClusterNodes, uid: str, topic: str) -> RawClient:
    """A persistent subscriber on node-2, gone offline once node-1 routes ``topic`` to it;
    returns a publisher on node-1."""
    sub = RawClient(nodes.port(2))
    ack = sub.connect(f"{uid}-s", properties=Properties(session_expiry_interval=300))
    assert ack.reason_code == 0
    subscribed(sub, topic, 2)
    pub = connected(nodes.port(1), f"{uid}-p")
    deadline = time.monotonic() + 15
    while True:  # QoS 0 probes until the route has spread
        assert time.monotonic() < deadline, "the route did not spread"
        pub.send_packet(Publish(topic, b"probe"))
        with contextlib.suppress(TimeoutError):
            if isinstance(sub.read_packet(timeout=0.2), Publish):
                break
    sub.send_packet(Disconnect(0))
    sub.close()
    return pub


def _ack(raw: RawClient) -> tuple[str, int, int]:
    packet = raw.read_packet(timeout=15)
    assert isinstance(packet, (Puback, Pubrec)), packet
    return type(packet).__name__, packet.packet_id, packet.reason_code


def test_a_remote_quota_drop_is_quota_exceeded_in_the_held_ack(
    redis_server: RedisServer, uid: str
) -> None:
    nodes = ClusterNodes(
        redis_server, f"quota-{uid}", extra_yaml="limits:\n  max_queued_messages: 1\n"
    )
    try:
        nodes.start_many(2)
        topic = f"{uid}/q"
        pub = _offline_subscriber_on_2(nodes, uid, topic)
        try:
            pub.send_packet(Publish(topic, b"1", qos=1, packet_id=1))  # queued
            assert _ack(pub) == ("Puback", 1, 0)
            pub.send_packet(Publish(topic, b"2", qos=1, packet_id=2))  # queue full
            assert _ack(pub) == ("Puback", 2, QUOTA_EXCEEDED)
            pub.send_packet(Publish(topic, b"3", qos=2, packet_id=3))  # queue full
            assert _ack(pub) == ("Pubrec", 3, QUOTA_EXCEEDED)
            # PUBREC >= 0x80 ended that exchange: the id is free again, not "re-sent"
            pub.send_packet(Publish(f"{uid}/nobody", b"4", qos=2, packet_id=3))
            assert _ack(pub) == ("Pubrec", 3, 0x10)
        finally:
            pub.close()
        # the dropped messages were not recorded either: the resumed session has only "1"
        sub = RawClient(nodes.port(1))
        try:
            ack = sub.connect(
                f"{uid}-s", clean_start=False, properties=Properties(session_expiry_interval=300)
            )
            assert ack.reason_code == 0 and ack.session_present
            got = sub.read_packet(timeout=15)
            assert isinstance(got, Publish) and (got.payload, got.qos) == (b"1", 1)
            sub.send_packet(Puback(got.packet_id))
            assert sub.read_nothing(1.0)  # not "2" nor "3"
            sub.send_packet(Disconnect(0, Properties(session_expiry_interval=0)))
        finally:
            sub.close()
    finally:
        nodes.stop_all()
