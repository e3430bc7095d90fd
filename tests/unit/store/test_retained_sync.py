"""Retained changes written to a real Redis with revisions, and loaded back by another node."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis

from tests.support.redis_server import RedisServer, running_redis
from tests.unit.cluster.test_held_forwarding import Hold
from xmq.codec.properties import Properties
from xmq.contract import ClusterKeys, RetainedMessage
from xmq.contract.retained_scripts import SET_RETAINED
from xmq.core.message import Message
from xmq.routing.retained import RetainedStore
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.retained_sync import RedisRetainedSync

pytestmark = pytest.mark.integration  # a real Redis


def _stored(client: redis.Redis, key: str) -> RetainedMessage:
    raw = client.get(key)
    assert isinstance(raw, bytes), f"{key} missing"
    return RetainedMessage.from_json(raw)


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with running_redis() as running:
        yield running


def _message(topic: str, payload: bytes, properties: Properties | None = None) -> Message:
    return Message(topic, payload, 1, True, properties, "pub", asyncio.get_running_loop().time())


async def test_changes_round_trip_through_redis(server: RedisServer) -> None:
    keys = ClusterKeys("retained-unit")
    loader = server.client()
    loader.script_load(SET_RETAINED)  # as a node does at start
    loader.close()
    batcher = RedisBatcher(server.url)
    await batcher.start()
    clock = asyncio.get_running_loop().time
    writer = RedisRetainedSync(batcher, keys, RetainedStore(), clock)
    props = Properties()
    props.content_type = "text/plain"
    props.user_properties = [("k", "v")]
    props.message_expiry_interval = 3600
    writer.changed(_message("a/1", b"one", props))
    writer.changed(_message("a/2", b"two"))
    writer.changed(_message("a/2", b"two again"))
    writer.changed(_message("a/3", b"three"))
    writer.changed(_message("a/3", b""))  # cleared: a tombstone
    writer.changed(_message("a/4", b"four"))
    writer.changed(_message("$SYS/broker/uptime", b"1"))  # node-local: not stored
    await batcher.flush()
    assert batcher.pipelines == 1  # the changes of one tick share a pipeline (and the PING)
    assert writer.written == 6
    assert writer.revisions["a/2"] > writer.revisions["a/1"]

    client = server.client()
    try:
        tombstone = _stored(client, keys.retained("a/3"))
        assert tombstone.tombstone
        assert client.pttl(keys.retained("a/3")) > 23 * 3600 * 1000
        assert 0 < client.pttl(keys.retained("a/1")) <= 3600 * 1000
        assert client.get(keys.retained("$SYS/broker/uptime")) is None
    finally:
        client.close()

    store: RetainedStore[Message] = RetainedStore()
    reader = RedisRetainedSync(batcher, keys, store, clock)
    reader.begin_load()
    reader.touched("a/4")  # changed over a link while loading: newer than the snapshot
    assert await reader.load(server.url, 2.0) == 2
    assert sorted(topic for topic, _ in store.items()) == ["a/1", "a/2"]
    first = store.get("a/1")
    assert first is not None
    assert first.payload == b"one"
    assert first.retain
    assert first.properties is not None
    assert first.properties.content_type == "text/plain"
    assert first.properties.user_properties == [("k", "v")]
    assert first.expires_at is not None
    assert 3590 < first.expires_at - clock() <= 3600
    second = store.get("a/2")
    assert second is not None
    assert second.payload == b"two again"

    # A reload takes only what is newer than what it saw: a/4 (skipped before), not a/2.
    store.set("a/2", _message("a/2", b"local"))
    assert await reader.load(server.url, 2.0) == 1
    assert "a/4" in store
    local = store.get("a/2")
    assert local is not None
    assert local.payload == b"local"
    await batcher.close()


async def test_a_held_ack_waits_until_redis_has_the_retained_record(server: RedisServer) -> None:
    keys = ClusterKeys("retained-held")
    batcher = RedisBatcher(server.url)
    await batcher.start()
    writer = RedisRetainedSync(batcher, keys, RetainedStore(), asyncio.get_running_loop().time)
    hold = Hold()
    writer.changed(_message("held/1", b"one"), hold)
    local = Hold()
    writer.changed(_message("$SYS/broker/load", b"1"), local)  # not stored: nothing to wait for
    assert local.routed().acked
    assert not hold.routed().acked  # the write has not been answered yet
    await batcher.flush()
    assert hold.acked
    client = server.client()
    try:
        assert _stored(client, keys.retained("held/1")).payload_b64 == "b25l"
    finally:
        client.close()
    await batcher.close()
