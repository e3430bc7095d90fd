"""Inbound QoS 2 (client to broker) of a persistent session: the PUBCOMP goes out only once
Redis has answered the ``SREM session:qos2in`` of its packet id (``max_queued_writes: 0``),
with the real core and store code on a real Redis.

A client that has its PUBCOMP may reuse the packet id at once for a new message. Had the node
been killed before the ``SREM`` was written, the node resuming the session would still hold the
id and take that new message for a re-send of the old one (PUBREC, not routed: a loss). Redis
is paused for writes (``CLIENT PAUSE WRITE``) so the ``SREM`` is not answered: no PUBCOMP may
reach the client meanwhile. Before the fix the PUBCOMP went out at once, before the ``SREM``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import redis

from tests.support.node_leases import write_lease
from tests.support.redis_server import RedisServer, running_redis
from tests.support.sink_link import SinkLink
from xmq.codec.packets import Connect, Pubcomp, Publish, Pubrec, Pubrel
from xmq.codec.properties import Properties
from xmq.contract import ClusterKeys
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.connection import ClientConnection
from xmq.core.connection_states import CONNECTED
from xmq.core.held_acks import AckGate
from xmq.core.session import QueueLimits
from xmq.core.settings import CoreSettings
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.redis_session_store import RedisSessionStore
from xmq.store.session_directory import RedisSessionDirectory

pytestmark = pytest.mark.integration

KEYS = ClusterKeys("t-qos2-inbound")
CLIENT = "pub"
_BATCHERS: list[RedisBatcher] = []


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with running_redis() as running:
        yield running


@pytest.fixture
async def sync(server: RedisServer) -> AsyncIterator[redis.Redis]:
    client = server.client()
    client.flushall()
    yield client
    client.client_unpause()
    client.close()
    for batcher in _BATCHERS:
        await batcher.close()
    _BATCHERS.clear()


_NOBODY = 0x10  # PUBREC: no matching subscribers (nobody subscribes to "t")


class WatchingLink(SinkLink):
    """Notes, for each PUBCOMP written to it, whether Redis still held its packet id."""

    __slots__ = ("pubcomps", "redis")

    def __init__(self, sync: redis.Redis) -> None:
        super().__init__()
        self.redis = sync
        self.pubcomps: list[tuple[int, bool]] = []  # (packet id, still in session:qos2in)

    def write(self, data: bytes) -> None:
        super().write(data)
        if data[:1] == b"\x70":
            packet_id = int.from_bytes(data[2:4], "big")
            stored = bool(self.redis.sismember(KEYS.session_qos2_inbound(CLIENT), str(packet_id)))
            self.pubcomps.append((packet_id, stored))


async def _broker(
    server: RedisServer, node: tuple[str, int] = ("a-0", 3), keys: ClusterKeys = KEYS
) -> tuple[Broker, RedisSessionStore]:
    """A cluster node's core with the Redis store and ``max_queued_writes`` 0 (held acks)."""
    broker = Broker(CoreSettings(queues=QueueLimits(1000, 1 << 20, 1 << 24, 10)))
    batcher = RedisBatcher(server.url)
    await batcher.start()
    _BATCHERS.append(batcher)
    identity = NodeIdentity(*node, online=True)
    with server.client() as sync:
        write_lease(sync, keys, *node)  # its claims carry this run's fencing token
    store = RedisSessionStore(batcher, keys, identity, broker.sessions, broker.now)
    broker.identity = identity
    broker.store = store
    broker.directory = RedisSessionDirectory(
        batcher, keys, identity, lambda client_id: client_id in broker.sessions, broker.now
    )
    broker.acks = AckGate(broker.settings.limits.receive_maximum)
    return broker, store


async def _connect(
    broker: Broker, link: SinkLink, expiry: int = 300, client_id: str = CLIENT
) -> ClientConnection:
    props = Properties()
    props.session_expiry_interval = expiry
    conn = ClientConnection(broker, link, AnonymousAuthenticator(), AllowAll())
    conn.handle(Connect(client_id=client_id, clean_start=False, properties=props))
    await _until(lambda: conn.state == CONNECTED)
    return conn


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("not reached within 5 s")


async def _received(conn: ClientConnection, link: WatchingLink, packet_id: int) -> None:
    """A QoS 2 PUBLISH from the client, answered with PUBREC (its id stored first)."""
    conn.handle(Publish("t", b"m", qos=2, packet_id=packet_id))
    await _until(lambda: Pubrec(packet_id, _NOBODY) in link.packets())


def _pause_writes(sync: redis.Redis) -> None:
    sync.client_pause(20_000, all=False)  # CLIENT PAUSE 20000 WRITE: the SREM waits


async def test_the_pubcomp_waits_until_the_packet_id_is_removed_in_redis(
    server: RedisServer, sync: redis.Redis
) -> None:
    broker, store = await _broker(server)
    link = WatchingLink(sync)
    conn = await _connect(broker, link)
    await _received(conn, link, 7)
    await store.flush()
    assert sync.sismember(KEYS.session_qos2_inbound(CLIENT), "7")
    _pause_writes(sync)
    conn.handle(Pubrel(7))
    await asyncio.sleep(0.3)
    assert link.packets() == []  # the client may not reuse 7 yet: Redis still holds it
    assert sync.sismember(KEYS.session_qos2_inbound(CLIENT), "7")
    sync.client_unpause()
    await _until(lambda: bool(link.pubcomps))
    assert link.packets() == [Pubcomp(7)]
    assert link.pubcomps == [(7, False)]  # removed in Redis before the PUBCOMP went
    assert broker.acks is not None and broker.acks.held == 0


async def test_a_clean_session_is_answered_at_once(server: RedisServer, sync: redis.Redis) -> None:
    broker, _ = await _broker(server)
    link = WatchingLink(sync)
    conn = await _connect(broker, link, expiry=0, client_id="clean")
    conn.handle(Publish("t", b"m", qos=2, packet_id=3))
    await _until(lambda: Pubrec(3, _NOBODY) in link.packets())
    _pause_writes(sync)
    conn.handle(Pubrel(3))  # nothing durable: no SREM, the PUBCOMP goes now
    assert link.packets() == [Pubcomp(3)]
