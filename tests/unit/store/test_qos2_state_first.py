"""Exactly-once QoS 2 to a persistent session across a kill -9, with the real core and store
code on a real Redis (``max_queued_writes: 0``).

Node A's link checks Redis at the instant a QoS 2 PUBLISH or a PUBREL is handed to it: the
packet id (``<id>``, resp. ``<id>:r``) must already be in ``session:inflight``. Then node A is
"killed" right there: Redis is paused for writes (``CLIENT PAUSE WRITE``), so nothing node A
still sends is applied, and its connection is dropped. Node B resumes the session from Redis
and must re-send what the client has seen under the same packet id: PUBLISH with DUP, or
PUBREL. Before the fix node A wrote the PUBLISH (PUBREL) first and its state afterwards: node
B then sent the message again as a new one (a second delivery to the application).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import cast

import pytest
import redis

from tests.support.node_leases import drop_lease, write_lease
from tests.support.redis_server import RedisServer, running_redis
from tests.support.sink_link import SinkLink
from xmq.codec.packets import (
    Connect,
    Packet,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Subscribe,
    SubscriptionRequest,
)
from xmq.codec.properties import Properties
from xmq.contract import ClusterKeys
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.connection import ClientConnection
from xmq.core.connection_states import CONNECTED
from xmq.core.message import Message
from xmq.core.session import QueueLimits
from xmq.core.settings import CoreSettings
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.redis_session_store import RedisSessionStore
from xmq.store.session_directory import RedisSessionDirectory

pytestmark = pytest.mark.integration

KEYS = ClusterKeys("t-qos2-first")
CLIENT = "sub"
_STARTED: list[Node] = []


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with running_redis() as running:
        yield running


@pytest.fixture
async def sync(server: RedisServer) -> AsyncIterator[redis.Redis]:
    """A plain client of the test's Redis; the nodes started meanwhile are closed after it."""
    client = server.client()
    client.flushall()
    yield client
    client.client_unpause()
    client.close()
    for node in _STARTED:
        await node.batcher.close()
    _STARTED.clear()


class WatchingLink(SinkLink):
    """A client link that notes, for each QoS 2 PUBLISH and PUBREL written to it, what
    ``session:inflight`` held in Redis at that instant, and can "kill" its node right then."""

    __slots__ = ("on_write", "redis", "states")

    def __init__(self, sync: redis.Redis) -> None:
        super().__init__()
        self.redis = sync
        self.states: list[tuple[str, int, set[str]]] = []  # (kind, packet id, stored states)
        self.on_write: Callable[[str, int], None] | None = None

    def _seen(self, kind: str, packet_id: int) -> None:
        raw = cast("dict[bytes, bytes]", self.redis.hgetall(KEYS.session_inflight(CLIENT)))
        self.states.append((kind, packet_id, {value.decode() for value in raw.values()}))
        if self.on_write is not None:
            self.on_write(kind, packet_id)

    def write_publish(self, head: bytes, packet_id: int, tail: bytes) -> None:
        super().write_publish(head, packet_id, tail)
        if (head[0] >> 1) & 3 == 2:
            self._seen("PUBLISH", packet_id)

    def write(self, data: bytes) -> None:
        super().write(data)
        if data[:1] == b"\x62":
            self._seen("PUBREL", int.from_bytes(data[2:4], "big"))


class Node:
    __slots__ = ("batcher", "broker", "store")

    def __init__(self, batcher: RedisBatcher, broker: Broker, store: RedisSessionStore) -> None:
        self.batcher = batcher
        self.broker = broker
        self.store = store


async def _node(server: RedisServer, node_id: str, epoch: int, max_inflight: int = 10) -> Node:
    limits = QueueLimits(1000, 1 << 20, 1 << 24, max_inflight)
    broker = Broker(CoreSettings(queues=limits))
    batcher = RedisBatcher(server.url)
    await batcher.start()
    identity = NodeIdentity(node_id, epoch, online=True)
    with server.client() as sync:
        write_lease(sync, KEYS, node_id, epoch)  # its claims carry this run's fencing token
    store = RedisSessionStore(batcher, KEYS, identity, broker.sessions, broker.now)
    broker.identity = identity
    broker.store = store
    broker.directory = RedisSessionDirectory(
        batcher, KEYS, identity, lambda client_id: client_id in broker.sessions, broker.now
    )
    node = Node(batcher, broker, store)
    _STARTED.append(node)
    return node


async def _connect(node: Node, link: SinkLink) -> ClientConnection:
    """A persistent MQTT 5 session for CLIENT (claimed in Redis, restored when stored)."""
    props = Properties()
    props.session_expiry_interval = 300
    conn = ClientConnection(node.broker, link, AnonymousAuthenticator(), AllowAll())
    conn.handle(Connect(client_id=CLIENT, clean_start=False, properties=props))
    await _until(lambda: conn.state == CONNECTED)
    return conn


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("not reached within 5 s")


def _message(payload: bytes, qos: int = 2) -> Message:
    return Message("t", payload, qos, False, None, "pub", 0.0)


def _pause_writes(sync: redis.Redis) -> Callable[[str, int], None]:
    def kill(kind: str, packet_id: int) -> None:
        sync.client_pause(20_000, all=False)  # CLIENT PAUSE 20000 WRITE

    return kill


async def _kill(node: Node, sync: redis.Redis) -> None:
    """Node A dies: what it sent meanwhile is held by the paused Redis and dropped with its
    connection (a paused client's commands run only if it is still connected)."""
    await asyncio.sleep(0.2)  # let it send whatever it would have sent
    await node.batcher.close()
    await asyncio.sleep(0.1)
    sync.client_unpause()
    drop_lease(sync, KEYS, node.broker.identity.node_id if node.broker.identity else "")


async def _first_node(server: RedisServer, sync: redis.Redis) -> tuple[Node, WatchingLink]:
    node = await _node(server, "a-0", 3)
    link = WatchingLink(sync)
    conn = await _connect(node, link)
    conn.handle(Subscribe(1, [SubscriptionRequest("t", 2)]))
    await node.store.flush()
    link.packets()
    session = conn.session
    assert session is not None and session.store is node.store
    session.packet_ids.next_id = 500  # node B's allocator starts at 1: a new id would show
    return node, link


def _publishes(packets: list[Packet]) -> list[tuple[int, bool, bytes]]:
    return [(p.packet_id, p.dup, p.payload) for p in packets if isinstance(p, Publish)]


async def test_a_publish_goes_out_after_its_packet_id_and_is_resent_with_it(
    server: RedisServer, sync: redis.Redis
) -> None:
    node_a, link_a = await _first_node(server, sync)
    link_a.on_write = _pause_writes(sync)  # the kill comes right after the client got it
    assert node_a.broker.publish(_message(b"once")) == 1
    await _until(lambda: bool(link_a.states))
    assert _publishes(link_a.packets()) == [(500, False, b"once")]
    await _kill(node_a, sync)

    node_b = await _node(server, "b-0", 9)
    link_b = WatchingLink(sync)
    await _connect(node_b, link_b)
    # the same message under the same packet id, marked as a re-delivery; not a new one
    assert _publishes(link_b.packets()) == [(500, True, b"once")]
    assert link_a.states == [("PUBLISH", 500, {"500"})]  # its id was stored before it went


async def test_a_pubrel_goes_out_after_the_pubrec_state_and_is_resent(
    server: RedisServer, sync: redis.Redis
) -> None:
    node_a, link_a = await _first_node(server, sync)
    assert node_a.broker.publish(_message(b"once")) == 1
    await _until(lambda: bool(link_a.states))
    conn_a = cast(ClientConnection, node_a.broker.sessions[CLIENT].connection)
    assert conn_a is not None
    assert _publishes(link_a.packets()) == [(500, False, b"once")]
    await node_a.store.flush()
    link_a.on_write = _pause_writes(sync)
    conn_a.handle(Pubrec(500))  # the client has the message
    await _until(lambda: len(link_a.states) == 2)
    assert [p for p in link_a.packets() if isinstance(p, Pubrel)] == [Pubrel(500)]
    # the client completes it (PUBCOMP), and may reuse 500; node A dies before the PUBCOMP
    await _kill(node_a, sync)

    node_b = await _node(server, "b-0", 9)
    link_b = WatchingLink(sync)
    conn_b = await _connect(node_b, link_b)
    resent = link_b.packets()
    assert _publishes(resent) == []  # a PUBLISH now would be a new message to the client
    assert [p for p in resent if isinstance(p, Pubrel)] == [Pubrel(500)]
    assert link_a.states[1] == ("PUBREL", 500, {"500:r"})  # stored before it went
    conn_b.handle(Pubcomp(500))
    await node_b.store.flush()
    assert sync.llen(KEYS.session_queue(CLIENT)) == 0
    assert sync.hlen(KEYS.session_inflight(CLIENT)) == 0


async def test_later_messages_wait_in_order_within_the_window(
    server: RedisServer, sync: redis.Redis
) -> None:
    node = await _node(server, "a-0", 3, max_inflight=2)
    link = WatchingLink(sync)
    conn = await _connect(node, link)
    conn.handle(Subscribe(1, [SubscriptionRequest("t", 2)]))
    await node.store.flush()
    link.packets()
    session = node.broker.sessions[CLIENT]
    windows: list[int] = []
    link.on_write = lambda kind, packet_id: windows.append(len(session.inflight))
    # a QoS 1 message right behind a QoS 2 one waits for the QoS 2 one's packet id
    for payload, qos in ((b"1", 2), (b"2", 1), (b"3", 2), (b"4", 1)):
        assert node.broker.publish(_message(payload, qos)) == 1
    await _until(lambda: len(link.states) == 1)
    await node.store.flush()
    sent = [p for p in link.packets() if isinstance(p, Publish)]
    assert [(p.payload, p.qos) for p in sent] == [(b"1", 2), (b"2", 1)]  # window of 2
    assert len(session.queue) == 2
    conn.handle(Pubrec(sent[0].packet_id))
    await _until(lambda: len(link.states) == 2)
    conn.handle(Pubcomp(sent[0].packet_id))  # a slot: "3" goes once its id is stored
    await _until(lambda: len(link.states) == 3)
    await node.store.flush()
    more = [p for p in link.packets() if isinstance(p, Publish)]
    assert [p.payload for p in more] == [b"3"]
    for kind, packet_id, stored in link.states:
        assert (f"{packet_id}:r" if kind == "PUBREL" else str(packet_id)) in stored
    assert max(windows) <= 2
