"""A message for a persistent session whose owner run is alive but not linked to this node yet.

A node that starts (or rejoins after losing its lease) reads the persistent sessions from
Redis; those owned by a run that still holds its lease wait there ("pending") until its link
forms and announces them. A message published here for such a session before that link is up
was routed nowhere: PUBACK 0x10 (no matching subscribers) and lost, though the session
exists and its client is connected (issue 12: the whole backlog a publisher sent after the
Redis pause, when the nodes rejoined and their clients reconnected before the links formed).
It now waits for that owner's link (the publisher's acknowledgement held) and goes to it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes
from tests.support.paho_client import PahoClient, props
from tests.support.redis_server import RedisServer

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
