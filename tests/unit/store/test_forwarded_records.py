"""The kill -9 race of a forwarded message, played with the real store code on a real Redis.

Node B records a message node A forwarded to it for its persistent session, then dies before
its PUBLISH_ACK reaches A; A replays its unconfirmed copy with ``APPEND_IF_OWNER``. Before
forward ids that left the message twice in the session's queue (a QoS 2 duplicate)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import cast

import pytest
import redis

from tests.support.node_leases import drop_lease, write_lease
from tests.support.redis_server import RedisServer, running_redis
from xmq.contract import ClusterKeys
from xmq.contract.message_record import MessageRecord, decode_record
from xmq.core.broker import Broker
from xmq.core.cluster_claims import apply_restored
from xmq.core.cluster_ports import ClaimOutcome, DurableContext, NodeIdentity
from xmq.core.message import Message
from xmq.core.session import Delivery, QueueLimits, Session, Subscription
from xmq.core.settings import CoreSettings
from xmq.core.stats import BrokerStats
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.redis_session_store import RedisSessionStore
from xmq.store.session_directory import RedisSessionDirectory

pytestmark = pytest.mark.integration

KEYS = ClusterKeys("t-forwarded")
B = ("b-0", 4)


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with running_redis() as running:
        yield running


async def _store(server: RedisServer, node: tuple[str, int]) -> RedisSessionStore:
    batcher = RedisBatcher(server.url)
    await batcher.start()
    identity = NodeIdentity(node[0], node[1], online=True)
    with server.client() as sync:
        write_lease(sync, KEYS, *node)  # its records carry this run's fencing token
    return RedisSessionStore(batcher, KEYS, identity, {}, lambda: 0.0)


def _queued(sync: redis.Redis, client_id: str) -> list[MessageRecord]:
    raw = cast("list[bytes]", sync.lrange(KEYS.session_queue(client_id), 0, -1))
    return [decode_record(item) for item in raw]


def _session(store: RedisSessionStore, client_id: str) -> Session:
    session = Session(client_id, QueueLimits(1000, 1 << 20, 1 << 24, 10), BrokerStats())
    session.store = store
    return session


def _forwarded(payload: bytes, forward_id: str) -> Message:
    # as decoded from the PUBLISH frame
    return Message("t", payload, 2, False, None, "pub", 0.0, forward_id=forward_id)


def _received(session: Session, message: Message) -> bool:
    """What node B's link does with a PUBLISH frame: deliver with the message's id."""
    context = DurableContext(None, message.forward_id)
    return session.deliver(message, 2, False, (), None, 0.0, context)


async def _replay(store: RedisSessionStore, client_id: str, message: Message) -> list[str]:
    """Node A's replay of an unconfirmed message for B's session (expecting B's dead run)."""
    moved: list[str] = []
    store.append_if_owner(client_id, B, message, 2, False, lambda node, _: moved.append(node))
    await store.flush()
    return moved


async def test_a_replayed_message_already_recorded_by_the_dead_receiver_is_skipped(
    server: RedisServer,
) -> None:
    sync = server.client()
    sync.flushall()
    sync.set(KEYS.session_owner("sub"), '{"node_id":"b-0","epoch":4}')
    # the replaying node holds its lease (its appends carry its fencing token); B's is gone
    sync.set(KEYS.lease("a-0"), '{"node_id":"a-0","epoch":7}')
    node_b, node_a = await _store(server, B), await _store(server, ("a-0", 7))
    session = _session(node_b, "sub")
    queue = KEYS.session_queue("sub")
    recorded, unrecorded, acknowledged = (
        _forwarded(b"1", "a-0/7/f1"),
        _forwarded(b"2", "a-0/7/f2"),
        _forwarded(b"3", "a-0/7/f3"),
    )
    assert _received(session, recorded)
    assert _received(session, acknowledged)
    await node_b.flush()
    # the subscriber completes the third one (PUBCOMP): its record is gone from the queue
    done = session.queue[1]
    node_b.acknowledged(session, done)
    await node_b.flush()
    assert [r.record_id for r in _queued(sync, "sub")] == ["a-0/7/f1"]
    # B is killed here; A replays all three (none was confirmed by a PUBLISH_ACK)
    drop_lease(sync, KEYS, B[0])
    for message in (recorded, unrecorded, acknowledged):
        assert await _replay(node_a, "sub", message) == []
    queued = [(r.record_id, r.payload) for r in _queued(sync, "sub")]
    assert queued == [("a-0/7/f1", b"1"), ("a-0/7/f2", b"2")]
    # a second replay (another sender's, or a retry) changes nothing either
    assert await _replay(node_a, "sub", unrecorded) == []
    assert sync.llen(queue) == 2
    sync.close()
    for store in (node_a, node_b):
        await store.batcher.close()


async def test_local_and_shared_records_keep_ids_of_their_own(server: RedisServer) -> None:
    sync = server.client()
    sync.flushall()
    node_b = await _store(server, B)
    session = _session(node_b, "sub")
    plain = Message("t", b"p", 2, False, None, "pub", 0.0)
    assert session.deliver(plain, 2, False, (), None, 0.0)  # published on this node
    forwarded = _forwarded(b"s", "a-0/7/f9")
    shared = Delivery(forwarded, 2, False, (), session.subscriptions.get("x"))
    shared.share = Subscription(session, "x", 2, share_group="g")  # a shared-group member's
    assert node_b.record(session, shared, 0.0, DurableContext(None, forwarded.forward_id))
    # the same forwarded message delivered again outside its routing (a retained message on
    # subscribe): its id is not in the call's context, so the record gets one of its own
    assert session.deliver(forwarded, 2, True, (), None, 0.0)
    await node_b.flush()
    assert [r.record_id for r in _queued(sync, "sub")] == ["b-0/4/1", "b-0/4/2", "b-0/4/3"]
    assert not sync.keys(f"{KEYS.prefix}session:seen:*")
    sync.close()
    await node_b.batcher.close()


async def test_a_message_reaching_a_session_twice_on_one_node_is_recorded_once(
    server: RedisServer,
) -> None:
    sync = server.client()
    sync.flushall()
    node_b = await _store(server, B)
    session = _session(node_b, "sub")
    message = _forwarded(b"1", "a-0/7/f1")
    assert _received(session, message)  # over a PUBLISH frame
    # and relayed as DIRECT during a takeover: the session has it (a delivery), not recorded
    assert _received(session, message)
    assert node_b.duplicates == 1
    await node_b.flush()
    assert sync.llen(KEYS.session_queue("sub")) == 1
    assert sync.exists(KEYS.session_seen("sub", "a-0/7/f1"))
    sync.close()
    await node_b.batcher.close()


async def test_a_copy_handed_on_into_the_queue_before_the_claim_is_delivered_once(
    server: RedisServer,
) -> None:
    """The old owner C hands a message on into the session's queue (its own append, before
    the new owner's claim); B's claim reads it back; then a third node's PUBLISH frame of the
    same message reaches the session on B: it is not recorded (nor delivered) a second time."""
    sync = server.client()
    sync.flushall()
    old = ("c-0", 2)
    sync.set(KEYS.session_owner("sub"), '{"node_id":"c-0","epoch":2}')
    sync.hset(KEYS.session_state("sub"), "protocol_version", 5)  # C's stored session
    node_c, node_b = await _store(server, old), await _store(server, B)
    message = _forwarded(b"1", "a-0/7/f1")
    assert await _replay_as(node_c, old, "sub", message) == []  # appended: C still owns it
    directory = RedisSessionDirectory(
        node_b.batcher, KEYS, node_b.identity, lambda _: False, time.time
    )
    claimed = await directory.claim(
        "sub",
        clean_start=False,
        durable=True,
        want_state=True,
        protocol_version=5,
        expiry_interval=300,
        expected=old,  # C handed it over (TAKEOVER_DONE)
    )
    assert claimed.outcome == ClaimOutcome.RESTORED and claimed.restored is not None
    session = _session(node_b, "sub")
    apply_restored(Broker(CoreSettings()), session, claimed.restored)
    assert [d.message.payload for d in session.queue] == [b"1"]
    assert _received(session, _forwarded(b"1", "a-0/7/f1"))  # the third node's copy: it has it
    assert node_b.duplicates == 1
    await node_b.flush()
    assert [r.record_id for r in _queued(sync, "sub")] == ["a-0/7/f1"]
    assert [d.message.payload for d in session.queue] == [b"1"]
    sync.close()
    for store in (node_b, node_c):
        await store.batcher.close()


async def _replay_as(
    store: RedisSessionStore, owner: tuple[str, int], client_id: str, message: Message
) -> list[str]:
    moved: list[str] = []
    store.append_if_owner(client_id, owner, message, 2, False, lambda node, _: moved.append(node))
    await store.flush()
    return moved


async def test_a_forwarded_fan_out_queues_one_shared_record(server: RedisServer) -> None:
    """One forwarded message to many offline persistent sessions here: each session's Redis
    queue gets the record, and the sessions' in-memory queues share one record object (not
    one each: 20,000 sessions x 10 messages grew a node by ~470 bytes a delivery); an
    acknowledgement still removes its own session's record only."""
    sync = server.client()
    sync.flushall()
    node_b = await _store(server, B)
    sessions = [_session(node_b, f"sub-{n}") for n in range(50)]
    message = _forwarded(b"1", "a-0/7/f1")
    other = _forwarded(b"2", "a-0/7/f2")
    for msg in (message, other):
        for session in sessions:
            assert _received(session, msg)
    await node_b.flush()
    records = {id(d.record) for session in sessions for d in session.queue}
    assert len(records) == 2  # one per message
    assert all(
        [r.record_id for r in _queued(sync, s.client_id)] == ["a-0/7/f1", "a-0/7/f2"]
        for s in sessions
    )
    first = sessions[0]
    delivery = first.queue.popleft()
    first.unqueued(delivery)
    assert (delivery.message, delivery.record) == (message, sessions[1].queue[0].record)
    node_b.acknowledged(first, delivery)
    await node_b.flush()
    assert [r.record_id for r in _queued(sync, "sub-0")] == ["a-0/7/f2"]
    assert [r.record_id for r in _queued(sync, "sub-1")] == ["a-0/7/f1", "a-0/7/f2"]
    sync.close()
    await node_b.batcher.close()
