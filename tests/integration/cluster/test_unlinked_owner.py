"""A message for a persistent session whose owner run is alive but not linked to this node yet.

A node that starts (or rejoins after losing its lease) reads the persistent sessions from
Redis; those owned by a run that still holds its lease wait there ("pending") until its link
forms and announces them. A message published here for such a session before that link is up
was routed nowhere: PUBACK 0x10 (no matching subscribers) and lost, though the session
exists and its client is connected (issue 12: the whole backlog a publisher sent after the
Redis pause, when the nodes rejoined and their clients reconnected before the links formed).
It now waits for that owner's link (the publisher's acknowledgement held) and goes to it.

Once that link is up the session stays pending until a live node announces it (or Redis says
it is no longer that run's): a run that owns the session in Redis without holding it (its
client went away during the claim, or its claim has not attached it yet) announces nothing, and
its messages go to it with DIRECT, which it appends to the session's queue. Before, the link
ended the wait for every session of the run: such a message was answered 0x10 and lost.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes, wait_for
from tests.support.http_probe import metric, wait_port
from tests.support.paho_client import PahoClient, props
from tests.support.redis_server import RedisServer
from xmq.contract import ClusterKeys
from xmq.contract.records import SessionOwner

pytestmark = pytest.mark.integration

LEASE_TTL_S = 10.0  # node-1 keeps its lease through its pause
EXPIRY = props(PacketTypes.CONNECT, SessionExpiryInterval=600)


class _Ack(threading.Event):
    def __init__(self, mid: int) -> None:
        super().__init__()
        self.mid = mid


def _publish(client: PahoClient, topic: str, payload: bytes) -> _Ack:
    """Publish at QoS 1 without waiting; the event is set when its PUBACK arrives."""
    with client._lock:  # before paho's thread can see the PUBACK
        info = client.client.publish(topic, payload, qos=1)
        event = _Ack(info.mid)
        previous = client.published.setdefault(info.mid, event)
    if previous is not event:  # acknowledged already
        event.set()
    return event


def _connect_and_leave(port: int, client_id: str) -> None:
    """An MQTT 5 CONNECT resuming ``client_id``'s session (expiry 600 s); the socket is
    closed 0.3 s later, with or without an answer."""
    name = client_id.encode()
    variable = b"\x00\x04MQTT\x05\x00\x00\x3c" + b"\x05\x11" + struct.pack(">I", 600)
    body = variable + struct.pack(">H", len(name)) + name
    assert len(body) < 0x80
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(bytes((0x10, len(body))) + body)
        time.sleep(0.3)  # read by the node, its claim run


def _wait_linked(metrics_port: int, peer: str) -> None:
    """Until the node serving ``/metrics`` on ``metrics_port`` has its link to ``peer`` up."""
    wait_for(
        lambda: metric(metrics_port, "xmq_cluster_link_up", f'peer="{peer}"') == 1.0,
        10,
        f"a link to {peer}",
    )


@pytest.fixture
def cluster(redis_server: RedisServer, uid: str) -> Iterator[ClusterNodes]:
    nodes = ClusterNodes(redis_server, f"unlinked-{uid}", lease_ttl_s=LEASE_TTL_S)
    try:
        yield nodes
    finally:
        nodes.stop_all()


def test_a_message_for_a_live_owner_not_linked_yet_waits_for_its_link(
    cluster: ClusterNodes, uid: str
) -> None:
    topic = f"{uid}/unlinked"
    owner = cluster.start(1)
    sub = PahoClient(cluster.port(1), f"{uid}-sub")
    pub: PahoClient | None = None
    try:
        sub.connect(clean_start=True, properties=EXPIRY)
        sub.subscribe(topic, qos=1)
        # node-1 stops answering (its lease stays live): node-2 starts without a link to it
        # (node-1, the smaller id, dials), and finds node-1's session live in Redis
        os.kill(owner.proc.pid, signal.SIGSTOP)
        try:
            cluster.start(2)
            pub = PahoClient(cluster.port(2), f"{uid}-pub")
            pub.connect(clean_start=True, properties=EXPIRY)
            acked = _publish(pub, topic, b"for a live owner not linked")
            if acked.wait(1.0):
                reason = pub.pub_reasons[acked.mid]
                pytest.fail(f"PUBACK {reason:#x} while the session's owner was not linked")
        finally:
            os.kill(owner.proc.pid, signal.SIGCONT)
        # node-1 renews its lease, dials node-2: the message goes to it over the new link
        assert [m.payload for m in sub.expect(1, timeout=15)] == [b"for a live owner not linked"]
        assert acked.wait(10)
        assert pub.pub_reasons[acked.mid] == 0
    finally:
        if pub is not None:
            pub.close()
        sub.close()


def test_a_session_its_linked_owner_holds_in_redis_but_has_not_announced_keeps_its_messages(
    redis_server: RedisServer, uid: str
) -> None:
    """node-1's run owns the session in Redis without holding it: it handed the session over
    to node-2 (TAKEOVER), which was paused, then killed, before its own claim ran — the state
    of every hand-over between the old owner's answer and the new owner's claim, made to
    last. node-3
    starts, reads the session as pending on node-1's run and links to node-1, whose snapshot
    does not name it. A message published on node-3 for it goes to node-1 (DIRECT), which
    appends it to the session's queue: the client gets it when it comes back. Before, the
    link ended the wait (at the next peer-loop pass): PUBACK 0x10, the message lost."""
    cluster = ClusterNodes(redis_server, f"unannounced-{uid}", lease_ttl_s=LEASE_TTL_S)
    topic = f"{uid}/unannounced"
    client_id = f"{uid}-sub"
    keys = ClusterKeys(cluster.cluster)
    redis = redis_server.client()
    pub: PahoClient | None = None
    try:
        owner = cluster.start(1, env={"XMQ_METRICS__ENABLED": "true"})
        cluster.start(2, env={"XMQ_METRICS__ENABLED": "true"})
        for index, peer in ((1, "node-2"), (2, "node-1")):
            _wait_linked(wait_port(cluster.nodes[index], "metrics"), peer)
        sub = PahoClient(cluster.port(1), client_id)
        sub.connect(clean_start=True, properties=EXPIRY)
        sub.subscribe(topic, qos=1)
        taker = cluster.nodes[2]
        os.kill(owner.proc.pid, signal.SIGSTOP)  # node-2's TAKEOVER waits in node-1's socket
        try:
            _connect_and_leave(cluster.port(2), client_id)
            os.kill(taker.proc.pid, signal.SIGSTOP)  # node-1's answer will wait in node-2's
        finally:
            os.kill(owner.proc.pid, signal.SIGCONT)
        assert sub.disconnects.get(timeout=10).reason == 0x8E  # node-1 handed it over

        raw = redis.get(keys.session_owner(client_id))
        assert raw is not None
        found = SessionOwner.from_json(raw)
        assert (found.node_id, found.epoch) == ("node-1", 1)  # still node-1's run's
        node3 = cluster.start(3, env={"XMQ_METRICS__ENABLED": "true"})
        http_port = wait_port(node3, "metrics")
        _wait_linked(http_port, "node-1")
        time.sleep(2.5)  # two peer-loop passes (1 s each) with the link up
        pub = PahoClient(cluster.port(3), f"{uid}-pub")
        pub.connect(clean_start=True)
        reason = pub.publish(topic, b"for a session nobody announced", qos=1)
        assert reason == 0, f"PUBACK {reason:#x} for a session its linked owner holds in Redis"
        assert metric(http_port, "xmq_cluster_orphan_appends_total", 'kind="unlinked_owner"') == 1
        cluster.kill(2)  # its claim never runs
        back = PahoClient(cluster.port(1), client_id)
        try:
            assert back.connect(clean_start=False, properties=EXPIRY).session_present
            assert [m.payload for m in back.expect(1, timeout=10)] == [
                b"for a session nobody announced"
            ]
        finally:
            back.close()
    finally:
        if pub is not None:
            pub.close()
        redis.close()
        cluster.stop_all()
