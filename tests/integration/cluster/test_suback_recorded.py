"""A persistent session's SUBACK means its subscription is in Redis (``max_queued_writes: 0``).

Node 1 reaches Redis through a gate. Held at the subscription's ``HSET``, node 1 must not
answer the SUBSCRIBE: a client told it is subscribed, whose node then pauses or dies before
the record is written, would have a subscription no other node knows, and a message published
there would get PUBACK 0x10 (no matching subscribers) and be lost. Not held, the SUBACK comes
once the record is written: node 1 killed right after it, the message published on node 2
reaches the session there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing

import pytest

from tests.integration.cluster.test_qos2_state_first import Receiver, Setup
from tests.support.cluster_nodes import ClusterNodes, clear_dead_lease
from tests.support.paho_client import PahoClient
from tests.support.redis_server import RedisServer
from xmq.codec.packets import Publish, Suback, Subscribe, SubscriptionRequest

pytestmark = pytest.mark.integration

SUBSCRIPTION_RECORD = rb"\$4\r\nHSET\r\n\$\d+\r\n[^\r]*session:subs:"


@pytest.fixture
def setup(redis_server: RedisServer, uid: str) -> Iterator[Setup]:
    with closing(Setup(redis_server, uid)) as started:
        yield started


def _subscribe(setup: Setup) -> None:
    receiver = setup.receiver
    assert not receiver.attach(setup.node_1.port, clean_start=True)
    receiver.send(Subscribe(1, [SubscriptionRequest(setup.topic, 1)]))


def test_no_suback_while_the_subscription_is_not_recorded(setup: Setup) -> None:
    setup.gate.hold(SUBSCRIPTION_RECORD)
    _subscribe(setup)
    assert setup.gate.held.wait(10)  # node 1 is writing the subscription: Redis does not answer
    raw = setup.receiver.raw
    assert raw is not None
    with pytest.raises(TimeoutError):
        packet = raw.read_packet(1.0)
        pytest.fail(f"{packet!r} before the subscription was recorded")
    setup.kill_node_1()  # the record never reaches Redis; the client was never told otherwise
    redis = setup.redis.client()
    try:
        assert not redis.keys(f"*session:subs:{setup.receiver.client_id}")
    finally:
        redis.close()


def test_a_subscription_acknowledged_just_before_a_kill_is_found_by_a_node_started_after(
    redis_server: RedisServer, uid: str
) -> None:
    """Node 1 killed as soon as its client has the SUBACK; node 2 starts after it and reads
    the persistent sessions from Redis: a message published there reaches the session."""
    nodes = ClusterNodes(redis_server, f"suback-{uid}")
    topic = f"{uid}/t"
    receiver = Receiver(f"{uid}-sub")
    try:
        nodes.start(1)
        assert not receiver.attach(nodes.port(1), clean_start=True)
        receiver.send(Subscribe(1, [SubscriptionRequest(topic, 1)]))
        raw = receiver.raw
        assert raw is not None
        assert isinstance(raw.read_packet(10), Suback)
        nodes.kill(1)  # at once: what was not written by now never is
        clear_dead_lease(redis_server, nodes.cluster, "node-1")
        nodes.start(2)
        publisher = PahoClient(nodes.port(2), "")
        publisher.connect()
        try:
            reason = publisher.publish(topic, b"after the suback", qos=1)
        finally:
            publisher.disconnect()
        assert reason == 0, f"PUBACK {reason:#x}: node 2 did not know the subscription"
        assert receiver.attach(nodes.port(2), clean_start=False)
        got = receiver.run(10, until=lambda: bool(receiver.qos1_ids))
        assert [p.payload for p in got if isinstance(p, Publish)] == [b"after the suback"]
    finally:
        receiver.close()
        nodes.stop_all()
