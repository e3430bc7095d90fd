"""A QoS 2 PUBLISH re-sent later than the old 60 s marker TTL reaches each persistent
subscriber once (issue 12).

Two real nodes (``max_queued_writes: 0``), a persistent QoS 2 subscriber on each, and a
persistent member of a shared group on node 1. A persistent publisher sends a QoS 2 PUBLISH
to node 1 and has its PUBREC; its connection drops before its PUBREL. It comes back on node 2
62 s later — longer than a node's ``session:seen`` / ``shared:seen`` markers lived (60 s:
``FORWARDED_SEEN_TTL_MS``, the lease TTL being 2 s here) and than the nodes' in-memory
recollection of the message (``ForwardedMarks``, 60 s: it forgets the older pairs when a newer
message comes, so another publisher's QoS 2 message comes first, as on any node with traffic)
— and sends the PUBLISH again (DUP).
Node 2 routes it once more (its claim read the packet id back from Redis). Before, every
subscriber's marker had expired and each got the message twice; now the markers of an open
exchange live until its release (``session:qos2marks``), and nobody gets it again.

Clean subscribers are not part of this test: their per-node memory (``core.routed_inbound_ids``)
still lives 60 s (docs/cluster.md, "Limits").
"""

from __future__ import annotations

import time

import pytest

from tests.integration.cluster.test_resent_qos2_clean_subscribers import (
    Setup,
    Subscriber,
    _until,
    setup,
)
from tests.support.raw_client import RawClient
from xmq.codec.packets import Pingreq, Pubcomp, Publish, Pubrec, Pubrel
from xmq.codec.properties import Properties

pytestmark = pytest.mark.integration

__all__ = ["setup"]  # the fixture: two nodes of one cluster on a real Redis

LATER_THAN_THE_OLD_TTL_S = 62.0
"""The old marker TTL is max(60 s, 3 x lease TTL + 30 s) = 60 s with the tests' 2 s lease."""


@pytest.mark.timeout(200)
def test_a_qos2_publish_resent_after_the_old_marker_ttl_reaches_each_subscriber_once(
    setup: Setup,
) -> None:
    topic = setup.topic
    subscribers = [
        Subscriber(setup.nodes[0].port, f"{setup.uid}-kept-1", topic, persistent=True),
        Subscriber(setup.nodes[1].port, f"{setup.uid}-kept-2", topic, persistent=True),
        Subscriber(setup.nodes[0].port, f"{setup.uid}-member", f"$share/g/{topic}", True),
    ]
    setup.clients.extend(s.client for s in subscribers)
    setup.warm(subscribers)

    publisher = setup.publisher(0, clean_start=True)
    publisher.send_packet(Publish(topic, b"command", qos=2, packet_id=7))
    _until(publisher, Pubrec(7))  # routed on node 1; its id recorded in Redis
    for subscriber in subscribers:
        assert subscriber.read(1.0) == [b"command"]  # and completed (PUBREC, PUBCOMP)
    publisher.close()  # gone before its PUBREL: the PUBREC counts as lost

    deadline = time.monotonic() + LATER_THAN_THE_OLD_TTL_S
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 20.0))
        for subscriber in subscribers:  # within their keep-alive
            subscriber.client.send_packet(Pingreq())
            subscriber.read(0.05)

    other = RawClient(setup.nodes[0].port)  # traffic: another persistent publisher's message
    setup.clients.append(other)
    props = Properties()
    props.session_expiry_interval = 3600
    assert other.connect(f"{setup.uid}-other", properties=props).reason_code == 0
    other.send_packet(Publish(topic, b"tick", qos=2, packet_id=1))
    _until(other, Pubrec(1))
    other.send_packet(Pubrel(1))
    _until(other, Pubcomp(1))
    for subscriber in subscribers:
        assert subscriber.read(1.0) == [b"command", b"tick"]

    publisher = setup.publisher(1, clean_start=False)
    publisher.send_packet(Publish(topic, b"command", qos=2, dup=True, packet_id=7))
    _until(publisher, Pubrec(7))
    publisher.send_packet(Pubrel(7))
    _until(publisher, Pubcomp(7))

    received = [subscriber.read(1.5) for subscriber in subscribers]
    assert received == [[b"command", b"tick"]] * 3, "a QoS 2 message delivered twice"

    # released: packet id 7 reused is a new message, delivered to each
    publisher.send_packet(Publish(topic, b"next", qos=2, packet_id=7))
    _until(publisher, Pubrec(7))
    received = [subscriber.read(1.5) for subscriber in subscribers]
    assert received == [[b"command", b"tick", b"next"]] * 3
