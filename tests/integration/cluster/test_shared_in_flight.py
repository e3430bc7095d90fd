"""A QoS 2 shared-subscription message sent to a member on another node stays that member's
(MQTT-4.8.2-4/-5): three real nodes, real Redis, the publisher on node-1, one member on each of
node-2 and node-3."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from tests.support.cluster_nodes import ClusterNodes
from tests.support.http_probe import metric, wait_port
from tests.support.raw_client import (
    RawClient,
    connected,
    end_session,
    next_publish,
    receive_qos2,
    subscribed,
)
from tests.support.redis_server import RedisServer
from xmq.codec.packets import Puback, Publish
from xmq.codec.properties import Properties

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def nodes(redis_server: RedisServer) -> Iterator[ClusterNodes]:
    cluster = ClusterNodes(redis_server, "shared-in-flight", metrics=True)
    try:
        cluster.start_many(3)
        yield cluster
    finally:
        cluster.stop_all()


def _members(nodes: ClusterNodes, uid: str, expiry: int) -> tuple[dict[int, RawClient], RawClient]:
    """A QoS 2 member of one group on node-2 and on node-3, once node-1 routes to both."""
    members: dict[int, RawClient] = {}
    for node in (2, 3):
        raw = RawClient(nodes.port(node))
        props = Properties(session_expiry_interval=expiry) if expiry else None
        assert raw.connect(f"{uid}-{node}", properties=props).reason_code == 0
        subscribed(raw, f"$share/g/{uid}/t", 2)
        members[node] = raw
    pub = connected(nodes.port(1), f"{uid}-p")
    reached: set[int] = set()
    deadline = time.monotonic() + 15
    while reached != {2, 3}:  # QoS 0 probes until both nodes' members have had one
        assert time.monotonic() < deadline, "the shared group did not spread"
        pub.send_packet(Publish(f"{uid}/t", b"probe"))
        for node, raw in members.items():
            with contextlib.suppress(TimeoutError):
                if isinstance(raw.read_packet(timeout=0.1), Publish):
                    reached.add(node)
    for raw in members.values():
        while not raw.read_nothing(0.3):
            pass  # late probes
    return members, pub


def _receiver(members: dict[int, RawClient]) -> tuple[int, Publish]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for node, raw in members.items():
            with contextlib.suppress(TimeoutError):
                got = raw.read_packet(timeout=0.2)
                assert isinstance(got, Publish), got
                return node, got
    raise AssertionError("no member got the message")


def _resumed(nodes: ClusterNodes, node: int, client_id: str) -> RawClient:
    """``client_id``'s session (Session Expiry 300) resumed on ``node``."""
    raw = RawClient(nodes.port(node))
    ack = raw.connect(
        client_id, clean_start=False, properties=Properties(session_expiry_interval=300)
    )
    assert ack.reason_code == 0 and ack.session_present
    return raw


@pytest.mark.spec("5:MQTT-4.8.2-4")
def test_qos2_in_flight_is_completed_when_its_member_resumes_on_another_node(
    nodes: ClusterNodes, uid: str
) -> None:
    members, pub = _members(nodes, uid, expiry=300)
    opened = [*members.values(), pub]
    try:
        pub.send_packet(Publish(f"{uid}/t", b"x", qos=2, packet_id=1))
        node, got = _receiver(members)
        assert got.qos == 2
        members.pop(node).close()  # no PUBREC; the session stays (on its node, in Redis)
        [other] = members.values()
        assert other.read_nothing(2.0)  # neither its node nor node-1 sends it elsewhere
        again = _resumed(nodes, 1, f"{uid}-{node}")  # the session resumes on node-1
        opened.append(again)
        resent = next_publish(again, timeout=15)
        assert (resent.payload, resent.dup, resent.packet_id) == (b"x", True, got.packet_id)
        receive_qos2(again, resent.packet_id)
        assert again.read_nothing(0.5) and other.read_nothing(0.5)
    finally:
        for raw in opened:
            end_session(raw)


@pytest.mark.spec("5:MQTT-4.8.2-5")
def test_qos2_of_an_ended_session_is_not_sent_to_a_member_on_another_node(
    nodes: ClusterNodes, uid: str
) -> None:
    members, pub = _members(nodes, uid, expiry=0)
    opened = [*members.values(), pub]
    try:
        pub.send_packet(Publish(f"{uid}/t", b"x", qos=2, packet_id=1))
        node, got = _receiver(members)
        metrics = wait_port(nodes.nodes[node], "metrics")
        before = metric(
            metrics, "xmq_messages_dropped_by_reason_total", 'reason="shared_session_ended"'
        )
        members.pop(node).close()  # no PUBREC; Session Expiry 0: the session ends now
        [other] = members.values()
        assert other.read_nothing(2.0)
        deadline = time.monotonic() + 10
        while (
            metric(metrics, "xmq_messages_dropped_by_reason_total", 'reason="shared_session_ended"')
            < before + 1
        ):
            assert time.monotonic() < deadline, "the dropped message was not counted"
            time.sleep(0.05)
        # a QoS 1 message still reaches the member left (no loss for the group)
        pub.send_packet(Publish(f"{uid}/t", b"one", qos=1, packet_id=2))
        assert next_publish(other).payload == b"one"
    finally:
        for raw in opened:
            end_session(raw)


def test_qos1_in_flight_goes_to_a_member_on_another_node(nodes: ClusterNodes, uid: str) -> None:
    """A QoS 1 message its member did not acknowledge goes to the member on the other node
    as soon as the connection is lost (MQTT 5.0 4.8.2 allows it): no loss for the group."""
    members, pub = _members(nodes, uid, expiry=300)
    opened = [*members.values(), pub]
    try:
        pub.send_packet(Publish(f"{uid}/t", b"one", qos=1, packet_id=1))
        node, got = _receiver(members)
        members.pop(node).close()
        [other] = members.values()
        again = next_publish(other)
        assert (again.payload, again.qos) == (b"one", 1)
        other.send_packet(Puback(again.packet_id))
        resumed = _resumed(nodes, node, f"{uid}-{node}")
        opened.append(resumed)
        assert resumed.read_nothing(1.0)  # handed on: not its member's any more
    finally:
        for raw in opened:
            end_session(raw)
