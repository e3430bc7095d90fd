"""A kill -9 between a subscriber's acknowledgement and its record's deferred removal.

The removal of an acknowledged record (QoS 1: an ``l`` write of ``FENCED_WRITES``; QoS 2: ``LREM
session:queue`` and ``HDEL session:inflight``) is deferred: it rides with the node's next Redis
flush (``RedisBatcher.deferred_coalesced``, ``RedisBatcher.deferred``). Node 1 reaches Redis
through a gate that stalls its connection at that removal and is killed (SIGKILL) while it is
held, so the removal never reaches Redis; the subscriber resumes its session on node 2. A QoS 1
message may come again (MQTT allows it); a QoS 2 message must not reach the client's application
twice: node 2 finds its PUBREC state (``<id>:r``) and sends the PUBREL only. Nothing
acknowledged is lost either way.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import closing

import pytest

from tests.integration.cluster.test_qos2_state_first import Setup
from tests.support.redis_server import RedisServer
from xmq.codec.packets import Publish, Pubrel


def removal_of(payload: bytes) -> bytes:
    """The removal of the record carrying ``payload`` from a session queue (the gate holds
    the pipeline it is in; the record holds the payload as it is): a QoS 2 record's ``LREM``,
    or a QoS 1 record's ``l`` write (op, key index, the record) in a ``FENCED_WRITES`` call."""
    lrem = rb"\$4\r\nLREM\r\n\$\d+\r\n[^\r]*session:queue:"
    fenced = rb"\$1\r\nl\r\n\$\d+\r\n\d+\r\n\$\d+\r\n"
    return rb"(?s)(?:" + lrem + rb"|" + fenced + rb").{0,2000}?" + re.escape(payload)


@pytest.fixture
def setup(redis_server: RedisServer, uid: str) -> Iterator[Setup]:
    with closing(Setup(redis_server, uid)) as started:
        yield started


def _queued(setup: Setup) -> int:
    """Records in Redis of the subscriber's session queue."""
    redis = setup.redis.client()
    try:
        keys = redis.keys(f"*session:queue:{setup.receiver.client_id}")
        return sum(redis.llen(key) for key in keys)
    finally:
        redis.close()


def _subscribed(setup: Setup) -> None:
    """The session on node 1, its warm-up messages' removals in Redis (before the gate)."""
    setup.subscribe_on_node_1()
    deadline = time.monotonic() + 5
    while _queued(setup) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _queued(setup) == 0


def test_a_qos2_message_completed_before_its_removal_is_not_delivered_again(
    setup: Setup,
) -> None:
    _subscribed(setup)
    receiver = setup.receiver
    setup.gate.hold(removal_of(b"once"))
    setup.publish(b"once")
    receiver.run(10, until=receiver.completed)  # PUBLISH, PUBREC, PUBREL, PUBCOMP
    assert receiver.delivered == [b"once"]
    assert setup.gate.held.wait(10)  # the PUBCOMP's removal: Redis never gets it
    setup.kill_node_1()
    assert receiver.attach(setup.node_2.port, clean_start=False)
    got = receiver.run(3)
    assert receiver.delivered == [b"once"], receiver.publishes
    assert receiver.publishes == [(4, False, b"once")]  # no PUBLISH again
    assert [type(p) for p in got] == [Pubrel]  # node 2 finishes the exchange: PUBREL only
    assert not receiver.held
    # completed with node 2: its own removal reaches Redis, nothing is owed any more
    deadline = time.monotonic() + 5
    while _queued(setup) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _queued(setup) == 0


def test_a_qos1_message_acknowledged_before_its_removal_may_come_again(setup: Setup) -> None:
    _subscribed(setup)
    receiver = setup.receiver
    setup.gate.hold(removal_of(b"at-least-once"))
    setup.publish(b"at-least-once", qos=1)
    receiver.run(10, until=lambda: len(receiver.qos1_ids) == 4)  # received and PUBACKed
    assert setup.gate.held.wait(10)  # its removal: Redis never gets it
    setup.kill_node_1()
    assert receiver.attach(setup.node_2.port, clean_start=False)
    got = receiver.run(3)
    again = [p for p in got if isinstance(p, Publish)]
    # sent again at most once (allowed for QoS 1: node 2 has it queued, not as sent)
    assert [p.payload for p in again] in ([], [b"at-least-once"])
