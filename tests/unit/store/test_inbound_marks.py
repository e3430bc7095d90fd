"""An inbound QoS 2 message's markers live as long as its exchange is open (issue 12), with the
real core, store and scripts on a real Redis.

A re-sent PUBLISH (DUP) of a persistent publisher is recognised by the ``session:seen`` /
``shared:seen`` markers its first routing wrote. They lived a fixed ``seen_ttl_ms`` (60 s in a
node): a re-send later than that was queued a second time. Now every such marker joins its
message's index (``session:qos2marks:<message id>``) and lives until the exchange is released
(``RELEASE_INBOUND_ID``; the session's release or clean start), which leaves it a short grace.
The stores here run with a ``seen_ttl_ms`` of 100 ms, so "later than the marker's TTL" is a
fraction of a second of real time (Redis expires keys on its own clock).
"""

from __future__ import annotations

import asyncio

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
    FencedWrite,
    FencedWrites,
    append_if_owner,
    claim_session,
    release_session,
)
from xmq.core.broker import Broker
from xmq.core.cluster_ports import DurableContext, NodeIdentity
from xmq.core.held_acks import AckGate
from xmq.core.message import Message
from xmq.core.session import QueueLimits, Session
from xmq.core.settings import CoreSettings
from xmq.core.stats import BrokerStats
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.redis_session_store import RedisSessionStore
from xmq.store.session_directory import RedisSessionDirectory

pytestmark = pytest.mark.integration

KEYS = ClusterKeys("t-inbound-marks")
A, B = ("a-0", 3), ("b-0", 5)
SEEN_TTL_MS = 100  # the marker TTL a forwarded record's marker has; inbound ones outlive it
server, sync = inbound.server, inbound.sync  # the fixtures: a Redis, flushed for each test
_until, _BATCHERS = inbound._until, inbound._BATCHERS


def _eval(client: redis.Redis, call: tuple[str, tuple[str, ...], tuple[object, ...]]) -> object:
    script, keys, args = call
    return client.eval(script, len(keys), *keys, *args)  # type: ignore[arg-type]


async def _store(
    server: RedisServer, sync: redis.Redis, node: tuple[str, int]
) -> RedisSessionStore:
    batcher = RedisBatcher(server.url)
    await batcher.start()
    _BATCHERS.append(batcher)
    write_lease(sync, KEYS, *node)
    identity = NodeIdentity(node[0], node[1], online=True)
    return RedisSessionStore(batcher, KEYS, identity, {}, lambda: 0.0, 0, SEEN_TTL_MS)


async def _broker(server: RedisServer, node: tuple[str, int]) -> Broker:
    """A cluster node's core with the Redis store (``max_queued_writes`` 0, held acks),
    markers of forwarded records living ``SEEN_TTL_MS``."""
    broker = Broker(CoreSettings(queues=QueueLimits(1000, 1 << 20, 1 << 24, 10)))
    batcher = RedisBatcher(server.url)
    await batcher.start()
    _BATCHERS.append(batcher)
    identity = NodeIdentity(*node, online=True)
    with server.client() as client:
        write_lease(client, KEYS, *node)
    store = RedisSessionStore(batcher, KEYS, identity, broker.sessions, broker.now, 0, SEEN_TTL_MS)
    broker.identity = identity
    broker.store = store
    broker.directory = RedisSessionDirectory(
        batcher, KEYS, identity, lambda client_id: client_id in broker.sessions, broker.now
    )
    broker.acks = AckGate(broker.settings.limits.receive_maximum)
    return broker


class Client:
    """A persistent session's connection to a node; a subscriber completes its exchanges."""

    def __init__(self, broker: Broker, client_id: str) -> None:
        self.broker, self.client_id = broker, client_id
        self.link = SinkLink()
        self.seen: list[Packet] = []

    async def connect(self) -> Client:
        self.conn = await inbound._connect(self.broker, self.link, client_id=self.client_id)
        return self

    def read(self) -> list[Packet]:
        for packet in self.link.packets():
            self.seen.append(packet)
            if isinstance(packet, Publish) and self.client_id == "sub":
                self.conn.handle(Pubrec(packet.packet_id))
            elif isinstance(packet, Pubrel):
                self.conn.handle(Pubcomp(packet.packet_id))
        return self.seen

    def payloads(self) -> list[bytes]:
        return [p.payload for p in self.read() if isinstance(p, Publish)]


def _seen_markers(client: redis.Redis) -> list[str]:
    keys = client.keys(f"{KEYS.prefix}session:seen:*")
    return sorted(key.decode() if isinstance(key, bytes) else key for key in keys)


async def test_a_message_recorded_again_after_the_seen_ttl_is_not_queued_twice(
    server: RedisServer, sync: redis.Redis
) -> None:
    at_a, at_b = await _store(server, sync, A), await _store(server, sync, B)
    limits = QueueLimits(1000, 1 << 20, 1 << 24, 10)
    message = Message("t", b"m", 2, False, None, "pub", 0.0, forward_id="abc/q5.0")
    for store in (at_a, at_b):
        session = Session("sub", limits, BrokerStats())
        session.store = store
        assert session.deliver(message, 2, False, (), None, 0.0, DurableContext(None, "abc/q5.0"))
        await store.flush()
        await asyncio.sleep(3 * SEEN_TTL_MS / 1000)  # beyond the seen TTL
    assert sync.llen(KEYS.session_queue("sub")) == 1  # B's copy of the open exchange: not queued
    assert at_b.duplicates == 1
    marker = KEYS.session_seen("sub", "abc/q5.0")
    assert sync.pttl(marker) > 3_600_000  # the ceiling, not the seen TTL
    assert sync.smembers(KEYS.inbound_marks("abc/q5.0")) == {marker.encode()}


async def test_a_resent_publish_later_than_the_seen_ttl_reaches_its_subscriber_once(
    server: RedisServer, sync: redis.Redis
) -> None:
    """Node A routes PUBLISH 5 to a persistent subscriber, which completes it; the publisher
    has its PUBREC, A dies, and the publisher re-sends the PUBLISH (DUP) on B later than the
    markers' old TTL: the subscriber does not get it again. Its PUBREL then shortens the
    markers to the grace, and packet id 5 reused is a new message."""
    node_a = await _broker(server, A)
    sub = await Client(node_a, "sub").connect()
    sub.conn.handle(Subscribe(1, [SubscriptionRequest("t", qos=2)]))
    await node_a.store.flush()  # type: ignore[union-attr]
    pub = await Client(node_a, "pub").connect()
    pub.conn.handle(Publish("t", b"m1", qos=2, packet_id=5))
    await _until(lambda: Pubrec(5) in pub.read())
    await _until(
        lambda: sub.payloads() == [b"m1"] and any(isinstance(p, Pubrel) for p in sub.read())
    )
    await node_a.store.flush()  # type: ignore[union-attr]
    assert sync.llen(KEYS.session_queue("sub")) == 0  # completed: nothing left to resume
    drop_lease(sync, KEYS, A[0])
    await asyncio.sleep(3 * SEEN_TTL_MS / 1000)  # beyond the seen TTL

    node_b = await _broker(server, B)
    sub = await Client(node_b, "sub").connect()
    pub = await Client(node_b, "pub").connect()
    pub.conn.handle(Publish("t", b"m1", qos=2, dup=True, packet_id=5))
    await _until(lambda: Pubrec(5) in pub.read())
    await node_b.store.flush()  # type: ignore[union-attr]
    await asyncio.sleep(0.2)
    assert sub.payloads() == []  # not a second copy
    assert sync.llen(KEYS.session_queue("sub")) == 0
    markers = _seen_markers(sync)
    assert len(markers) == 1  # the subscriber's marker of the open exchange, kept

    pub.conn.handle(Pubrel(5))  # the exchange closes: its markers keep only the grace
    await _until(lambda: Pubcomp(5) in pub.read())
    assert 0 < sync.pttl(markers[0]) <= node_b.store.release_grace_ms  # type: ignore[union-attr]
    assert not sync.keys(f"{KEYS.prefix}session:qos2marks:*")
    pub.conn.handle(Publish("t", b"m2", qos=2, packet_id=5))  # next generation: a new message
    await _until(lambda: sub.payloads() == [b"m2"])


def _claim(client: redis.Redis, client_id: str, token: str, clean: bool) -> object:
    call = claim_session(
        KEYS,
        client_id,
        *A,
        clean_start=clean,
        durable=True,
        want_state=not clean,
        protocol_version=5,
        expiry_interval=300,
        incarnation=token,
        release_grace_ms=500,
    )
    return client.eval(call.script, len(call.keys), *call.keys, *call.args)


def test_a_session_ending_shortens_the_markers_of_its_open_exchanges(sync: redis.Redis) -> None:
    """``RELEASE_SESSION`` and a clean start's claim leave the markers of every open inbound
    exchange of the session (its ``qos2in`` ids, at their generation) the grace, and delete
    their indexes; markers of a released generation or of another session are not touched."""
    write_lease(sync, KEYS, *A)
    at_a = FencedWrites(KEYS, A, SEEN_TTL_MS)
    for client_id in ("pub", "other"):
        assert _claim(sync, client_id, f"inc-{client_id}", clean=False) == [0]
        sync.sadd(KEYS.session_qos2_inbound(client_id), "5", "6")
        sync.hset(KEYS.session_qos2_generations(client_id), "6", "2")
    writes: list[FencedWrite] = []
    for message_id in ("inc-pub/q5.0", "inc-pub/q6.2", "inc-pub/q6.1", "inc-other/q5.0"):
        seen = KEYS.session_seen("sub", message_id)
        writes.append(
            ("r", KEYS.session_queue("sub"), message_id, seen, KEYS.inbound_marks(message_id))
        )
        shared = KEYS.shared_seen(message_id, "g", "t")
        writes.append(("c", shared, "m1", "", KEYS.inbound_marks(message_id)))
    assert _eval(sync, at_a.build(writes)) == [1] * 8

    def ttls(message_id: str) -> list[int]:
        return [
            sync.pttl(KEYS.session_seen("sub", message_id)),
            sync.pttl(KEYS.shared_seen(message_id, "g", "t")),
        ]

    call = release_session(KEYS, "pub", *A, 400)
    assert sync.eval(call.script, len(call.keys), *call.keys, *call.args) == 1
    for open_id in ("inc-pub/q5.0", "inc-pub/q6.2"):  # the session's open exchanges
        assert all(0 < ttl <= 400 for ttl in ttls(open_id)), open_id
        assert not sync.exists(KEYS.inbound_marks(open_id))
    for untouched in ("inc-pub/q6.1", "inc-other/q5.0"):
        assert all(ttl > 3_600_000 for ttl in ttls(untouched)), untouched
        assert sync.scard(KEYS.inbound_marks(untouched)) == 2

    assert _claim(sync, "other", "inc-new", clean=True) == [0]  # a clean start: likewise
    assert all(0 < ttl <= 500 for ttl in ttls("inc-other/q5.0"))
    assert not sync.exists(KEYS.inbound_marks("inc-other/q5.0"))


def test_a_dead_owner_s_append_indexes_an_inbound_message_s_marker(sync: redis.Redis) -> None:
    """``APPEND_IF_OWNER`` (the session's owner is dead): an inbound message id's marker lives
    with the exchange, in its index; a forward id's keeps the seen TTL."""
    write_lease(sync, KEYS, *B)
    sync.set(KEYS.session_owner("sub"), '{"node_id": "a-0", "epoch": 3}')  # A has no lease
    for record_id in ("abc/q5.0", "b-0/5/f1"):
        call = append_if_owner(KEYS, "sub", A, b"rec", record_id, SEEN_TTL_MS, B)
        assert _eval(sync, call) == [0, b"", 0]
    marker = KEYS.session_seen("sub", "abc/q5.0")
    assert sync.pttl(marker) > 3_600_000
    assert sync.smembers(KEYS.inbound_marks("abc/q5.0")) == {marker.encode()}
    assert 0 < sync.pttl(KEYS.session_seen("sub", "b-0/5/f1")) <= SEEN_TTL_MS
    assert not sync.exists(KEYS.inbound_marks("b-0/5/f1"))
