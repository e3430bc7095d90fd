"""Records and inbound QoS 2 ids of persistent sessions carry the writing run's fencing token,
on a real Redis: a run whose lease is gone (expired while Redis was paused, or its node
restarted since) writes neither, and the publisher's held acknowledgement fails.

Before, a node that lost its lease while Redis was paused still had its pending ``RPUSH`` and
``SADD`` applied once Redis resumed: an inbound id without the message's records made the
publisher's re-sent PUBLISH look handled on its next node (PUBCOMP, never delivered)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.support.node_leases import drop_lease, write_lease
from tests.support.redis_server import RedisServer, running_redis
from xmq.contract import ClusterKeys
from xmq.contract.session_scripts import fenced_inbound_id, fenced_record
from xmq.core.cluster_ports import DurableContext, NodeIdentity
from xmq.core.message import Message
from xmq.core.session import QueueLimits, Session
from xmq.core.stats import BrokerStats
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.redis_session_store import RedisSessionStore

pytestmark = pytest.mark.integration

KEYS = ClusterKeys("t-fenced")
NODE = ("a-0", 3)


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with running_redis() as running:
        yield running


@pytest.fixture
def sync(server: RedisServer) -> Iterator[redis.Redis]:
    client = server.client()
    client.flushall()
    yield client
    client.close()


Call = tuple[str, tuple[str, ...], tuple[str | bytes, ...]]


def _eval(client: redis.Redis, call: Call) -> object:
    script, keys, args = call
    try:
        return client.eval(script, len(keys), *keys, *args)
    except redis.ResponseError as error:
        return str(error)


def test_a_record_is_written_only_by_a_run_holding_its_lease(sync: redis.Redis) -> None:
    queue, seen = KEYS.session_queue("c1"), KEYS.session_seen("c1", "b-0/1/f1")
    call = fenced_record(KEYS, "c1", NODE, b"r1", "b-0/1/f1")
    assert str(_eval(sync, call)).startswith("FENCED")  # no lease at all
    write_lease(sync, KEYS, "a-0", 4)  # a newer run of the node
    assert str(_eval(sync, call)).startswith("FENCED")
    assert not sync.exists(queue, seen)
    write_lease(sync, KEYS, *NODE)
    assert _eval(sync, call) == 1
    assert sync.lrange(queue, 0, -1) == [b"r1"] and sync.exists(seen)
    # sent again after a lost connection: pushed only when not there
    again = fenced_record(KEYS, "c1", NODE, b"r1", once=True)
    assert _eval(sync, again) == 1
    assert _eval(sync, fenced_record(KEYS, "c1", NODE, b"r2", once=True)) == 1
    assert sync.lrange(queue, 0, -1) == [b"r1", b"r2"]


def test_an_inbound_id_is_added_only_by_a_run_holding_its_lease(sync: redis.Redis) -> None:
    inbound = KEYS.session_qos2_inbound("p1")
    call = fenced_inbound_id(KEYS, "p1", NODE, 17)
    assert str(_eval(sync, call)).startswith("FENCED")
    assert not sync.exists(inbound)
    write_lease(sync, KEYS, *NODE)
    assert _eval(sync, call) == 1
    assert sync.smembers(inbound) == {b"17"}


class Hold:
    def __init__(self) -> None:
        self.count = 0
        self.released = 0
        self.failed = 0

    def hold(self) -> None:
        self.count += 1

    def release(self) -> None:
        self.released += 1

    def fail(self) -> None:
        self.failed += 1

    def undelivered(self, reason: int) -> None:
        self.released += 1


async def started_store(
    server: RedisServer, identity: NodeIdentity
) -> tuple[RedisBatcher, RedisSessionStore, Session]:
    """A store of the run ``identity`` (keys ``KEYS``), its batcher started, and the store's
    persistent session ``c1``."""
    batcher = RedisBatcher(server.url)
    await batcher.start()
    store = RedisSessionStore(batcher, KEYS, identity, {}, lambda: 0.0)
    session = Session("c1", QueueLimits(1000, 1 << 20, 1 << 24, 10), BrokerStats())
    session.store = store
    return batcher, store, session


async def test_a_stale_run_s_record_and_inbound_id_fail_its_held_ack(
    server: RedisServer, sync: redis.Redis
) -> None:
    batcher, store, session = await started_store(server, NodeIdentity(*NODE, online=True))
    publisher = Session("p1", QueueLimits(1000, 1 << 20, 1 << 24, 10), BrokerStats())
    publisher.store = store
    try:
        for lease_held, outcome in ((True, (2, 0)), (False, (0, 2))):
            sync.delete(KEYS.session_queue("c1"), KEYS.session_qos2_inbound("p1"))
            if lease_held:
                write_lease(sync, KEYS, *NODE)
            else:
                drop_lease(sync, KEYS, NODE[0])  # expired while Redis was paused
            hold = Hold()
            message = Message("t", b"m", 2, False, None, "p1", 0.0)
            session.deliver(message, 2, False, (), None, 0.0, DurableContext(hold))
            store.inbound_changed(publisher, 9, True, hold)
            await store.flush()
            assert hold.count == 2
            assert (hold.released, hold.failed) == outcome
            written = int(sync.llen(KEYS.session_queue("c1")))
            assert written == (1 if lease_held else 0)
            assert bool(sync.sismember(KEYS.session_qos2_inbound("p1"), "9")) is lease_held
    finally:
        await batcher.close()
