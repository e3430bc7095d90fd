"""Inbound QoS 2 routing is idempotent per destination session (``core.inbound_ids``), with the
real core, store and scripts on a real Redis.

A persistent session's QoS 2 PUBLISH is routed under an id derived from the session's
incarnation, the packet id and how many times that packet id was released, so the PUBLISH sent
again (DUP) on another node carries the same id, and a session that has it queued does not
queue it again. The two races of issue 12 (docs/cluster.md "Limits"), each left in Redis as a
node dying at that instant leaves it, then the publisher and the subscriber resume on node B:

* the message's record is written but not its packet id (node cut from Redis before its
  ``SADD``): B routes the re-sent PUBLISH as a new message — before, the subscriber got it
  twice;
* the packet id is written but not the record (fenced after a Redis pause): B routes the
  re-sent PUBLISH again — before, it answered PUBREC without routing it and the subscriber
  never got it.
"""

from __future__ import annotations

import pytest
import redis

from tests.support.node_leases import drop_lease, write_lease
from tests.support.redis_server import RedisServer
from tests.support.sink_link import SinkLink
from tests.unit.store import test_qos2_inbound_release as inbound
from xmq.codec.packets import (
    Packet,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Subscribe,
    SubscriptionRequest,
)
from xmq.contract import ClusterKeys
from xmq.contract.session_scripts import (
    FencedWrites,
    claim_session,
    release_inbound_id,
    release_session,
)
from xmq.core.broker import Broker
from xmq.core.cluster_ports import DurableContext, NodeIdentity
from xmq.core.inbound_ids import InboundMessageIds, is_derived_id
from xmq.core.message import Message
from xmq.core.session import QueueLimits, Session
from xmq.core.stats import BrokerStats
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.redis_session_store import RedisSessionStore

pytestmark = pytest.mark.integration

KEYS = ClusterKeys("t-inbound-ids")
A, B = ("a-0", 3), ("b-0", 5)
server, sync = inbound.server, inbound.sync  # the fixtures: a Redis, flushed for each test
_broker, _connect, _until = inbound._broker, inbound._connect, inbound._until
_BATCHERS = inbound._BATCHERS  # closed after each test by ``sync``


def _eval(client: redis.Redis, call: tuple[str, tuple[str, ...], tuple[object, ...]]) -> object:
    script, keys, args = call
    return client.eval(script, len(keys), *keys, *args)  # type: ignore[arg-type]


# -- the scripts --------------------------------------------------------------------------


def test_a_record_whose_message_the_session_has_queued_is_not_pushed(
    sync: redis.Redis,
) -> None:
    queue, seen = KEYS.session_queue("sub"), KEYS.session_seen("sub", "i1/q5.0")
    write_lease(sync, KEYS, *A)
    write_lease(sync, KEYS, *B)
    at_a, at_b = FencedWrites(KEYS, A), FencedWrites(KEYS, B)
    write = ("r", queue, b"rec", seen, "")
    assert _eval(sync, at_a.build([write])) == [1]
    assert _eval(sync, at_b.build([write])) == [0]  # another node's copy: not queued again
    assert _eval(sync, at_a.build([write])) == [0]  # nor the same run's second one
    # a call cut off by a lost connection is sent again push-if-absent: it finds its own
    # marker and does not push twice; another run's retry finds a marker not its own
    assert _eval(sync, at_a.build([write], once=True)) == [1]
    assert _eval(sync, at_b.build([write], once=True)) == [0]
    assert sync.lrange(queue, 0, -1) == [b"rec"]
    # a record without a marker (a local id) is pushed as before
    assert _eval(sync, at_b.build([("r", queue, b"own", "", "")])) == [1]
    assert sync.lrange(queue, 0, -1) == [b"rec", b"own"]


def test_a_release_moves_the_generation_on_once(sync: redis.Redis) -> None:
    inbound, generations = KEYS.session_qos2_inbound("pub"), KEYS.session_qos2_generations("pub")
    sync.sadd(inbound, "5")
    assert _eval(sync, release_inbound_id(KEYS, "pub", 5, 0)) == 1
    assert not sync.sismember(inbound, "5") and sync.hget(generations, "5") == b"1"
    sync.sadd(inbound, "5")  # the id reused for the next message (generation 1)
    # a retried or stale release of generation 0 changes nothing: the new id stays
    assert _eval(sync, release_inbound_id(KEYS, "pub", 5, 0)) == 0
    assert sync.sismember(inbound, "5") and sync.hget(generations, "5") == b"1"
    assert _eval(sync, release_inbound_id(KEYS, "pub", 5, 1)) == 1
    assert sync.hget(generations, "5") == b"2"


def _claim(
    sync: redis.Redis, token: str, clean: bool = False, node: tuple[str, int] = A
) -> list[object]:
    call = claim_session(
        KEYS,
        "pub",
        *node,
        clean_start=clean,
        durable=True,
        want_state=not clean,
        protocol_version=5,
        expiry_interval=300,
        incarnation=token,
    )
    reply = sync.eval(call.script, len(call.keys), *call.keys, *call.args)
    assert isinstance(reply, list)
    return reply


def test_a_session_keeps_its_incarnation_until_it_starts_clean(sync: redis.Redis) -> None:
    state, generations = KEYS.session_state("pub"), KEYS.session_qos2_generations("pub")
    write_lease(sync, KEYS, *A)
    write_lease(sync, KEYS, *B)
    assert _claim(sync, "first") == [0]
    assert sync.hget(state, "incarnation") == b"first"
    sync.sadd(KEYS.session_qos2_inbound("pub"), "9")
    sync.hset(generations, "5", "2")
    drop_lease(sync, KEYS, A[0])  # A dies: B resumes the session, under its incarnation
    reply = _claim(sync, "second", node=B)
    assert reply[0] == 1 and reply[7] == [b"9"]
    assert reply[8] == b"first" and reply[9] == [b"5", b"2"]
    assert _claim(sync, "third", clean=True, node=B) == [0]  # a new session: a new one
    assert sync.hget(state, "incarnation") == b"third" and not sync.exists(generations)
    sync.hset(generations, "5", "1")
    call = release_session(KEYS, "pub", *B)
    ended = sync.eval(call.script, len(call.keys), *call.keys, *call.args)
    assert ended == 1  # the session ended: all of it goes
    assert not sync.exists(generations, state)


def test_message_ids_change_with_the_generation_and_name_a_message() -> None:
    ids = InboundMessageIds("abc", {7: 2}, (7,))
    assert ids.message_id(5) == "abc/q5.0" and ids.message_id(7) == "abc/q7.2"
    assert is_derived_id(ids.message_id(5)) and is_derived_id("a-0/3/f12")
    assert not is_derived_id("a-0/3/12")
    assert ids.released(7) == 2 and ids.message_id(7) == "abc/q7.3"
    assert not ids.route_again(7)  # released: no longer the restored message


async def test_two_nodes_recording_one_message_for_a_session_queue_it_once(
    server: RedisServer, sync: redis.Redis
) -> None:
    stores = []
    for node in (A, B):
        batcher = RedisBatcher(server.url)
        await batcher.start()
        _BATCHERS.append(batcher)
        write_lease(sync, KEYS, *node)
        identity = NodeIdentity(node[0], node[1], online=True)
        stores.append(RedisSessionStore(batcher, KEYS, identity, {}, lambda: 0.0))
    limits = QueueLimits(1000, 1 << 20, 1 << 24, 10)
    sessions = [Session("sub", limits, BrokerStats()) for _ in stores]
    message = Message("t", b"m", 2, False, None, "pub", 0.0, forward_id="abc/q5.0")
    for store, session in zip(stores, sessions, strict=True):
        session.store = store
        assert session.deliver(message, 2, False, (), None, 0.0, DurableContext(None, "abc/q5.0"))
        await store.flush()
    assert sync.llen(KEYS.session_queue("sub")) == 1
    assert [len(session.queue) for session in sessions] == [1, 0]  # B's copy not delivered
    assert stores[1].duplicates == 1


# -- two nodes, one publisher that moves ----------------------------------------------------


class Client:
    """A persistent session's connection to a node, and every packet it got."""

    def __init__(self, broker: Broker, client_id: str) -> None:
        self.broker, self.client_id = broker, client_id
        self.link = SinkLink()
        self.seen: list[Packet] = []

    async def connect(self) -> Client:
        self.conn = await _connect(self.broker, self.link, client_id=self.client_id)
        return self

    def read(self) -> list[Packet]:
        self.seen += self.link.packets()
        return self.seen

    def payloads(self) -> list[bytes]:
        return [p.payload for p in self.read() if isinstance(p, Publish)]


async def _first_run(server: RedisServer, sync: redis.Redis) -> tuple[Client, Client]:
    """Node A: the subscriber subscribes, the publisher sends PUBLISH 5 and gets its PUBREC;
    the subscriber has the message. Then A dies (its lease is gone)."""
    node_a, _ = await _broker(server, A, KEYS)
    sub = await Client(node_a, "sub").connect()
    sub.conn.handle(Subscribe(1, [SubscriptionRequest("t", qos=2)]))
    await node_a.store.flush()  # type: ignore[union-attr]
    pub = await Client(node_a, "pub").connect()
    pub.conn.handle(Publish("t", b"m1", qos=2, packet_id=5))
    await _until(lambda: Pubrec(5) in pub.read())
    assert sub.payloads() == [b"m1"]
    drop_lease(sync, KEYS, A[0])
    return pub, sub


async def _moved_to_b(server: RedisServer, sync: redis.Redis) -> tuple[Broker, Client, Client]:
    node_b, _ = await _broker(server, B, KEYS)
    sub = await Client(node_b, "sub").connect()
    pub = await Client(node_b, "pub").connect()
    return node_b, pub, sub


async def test_a_resent_publish_whose_id_was_not_written_is_not_delivered_twice(
    server: RedisServer, sync: redis.Redis
) -> None:
    await _first_run(server, sync)
    sync.srem(KEYS.session_qos2_inbound("pub"), "5")  # A died before its SADD was applied
    node_b, pub, sub = await _moved_to_b(server, sync)
    resumed = sub.payloads()  # the subscriber's session resumes its queued copy
    assert resumed == [b"m1"]
    pub.conn.handle(Publish("t", b"m1", qos=2, dup=True, packet_id=5))
    await _until(lambda: Pubrec(5) in pub.read())
    await node_b.store.flush()  # type: ignore[union-attr]
    assert sub.payloads() == [b"m1"]  # not a second copy
    assert sync.llen(KEYS.session_queue("sub")) == 1
    # released: packet id 5 reused is a new message, delivered
    pub.conn.handle(Pubrel(5))
    await _until(lambda: Pubcomp(5) in pub.read())
    pub.conn.handle(Publish("t", b"m2", qos=2, packet_id=5))
    await _until(lambda: pub.read().count(Pubrec(5)) == 2)
    await _until(lambda: sub.payloads() == [b"m1", b"m2"])


async def test_a_resent_publish_whose_record_was_not_written_is_routed_again(
    server: RedisServer, sync: redis.Redis
) -> None:
    await _first_run(server, sync)
    # the id was written, the subscriber's record was not (refused: fenced)
    sync.delete(KEYS.session_queue("sub"), KEYS.session_inflight("sub"))
    for key in sync.keys(f"{KEYS.prefix}session:seen:*"):
        sync.delete(key)
    node_b, pub, sub = await _moved_to_b(server, sync)
    assert sub.payloads() == []
    pub.conn.handle(Publish("t", b"m1", qos=2, dup=True, packet_id=5))
    await _until(lambda: Pubrec(5) in pub.read())
    await _until(lambda: sub.payloads() == [b"m1"])
    # sent once more (its PUBREC lost): this node routed it, so it is not routed again
    pub.conn.handle(Publish("t", b"m1", qos=2, dup=True, packet_id=5))
    await _until(lambda: pub.read().count(Pubrec(5)) == 2)
    await node_b.store.flush()  # type: ignore[union-attr]
    assert sub.payloads() == [b"m1"]
