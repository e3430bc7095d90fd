"""APPEND_IF_OWNER with forwarded record ids on a real redis-server: a replayed copy of a
message already queued for the session (even one acknowledged since) is not queued again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.support.node_leases import write_lease
from tests.support.redis_server import running_redis
from xmq.contract import ClusterKeys
from xmq.contract.session_replies import AppendOutcome
from xmq.contract.session_scripts import (
    FORWARDED_SEEN_TTL_MS,
    append_if_owner,
)

pytestmark = pytest.mark.integration

KEYS = ClusterKeys("t-append")
DEAD = ("b-0", 4)
FORWARD_ID = "a-0/7/f12"


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with running_redis() as server:
        yield server.url


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url)
    connection.flushall()
    connection.set(KEYS.session_owner("c1"), '{"node_id":"b-0","epoch":4}')
    yield connection
    connection.close()


def _append(
    client: redis.Redis,
    record: bytes,
    forward_id: str = FORWARD_ID,
    owner: tuple[str, int] = DEAD,
    client_id: str = "c1",
) -> list[object]:
    script, keys, args = append_if_owner(KEYS, client_id, owner, record, forward_id)
    reply = client.eval(script, len(keys), *keys, *args)
    assert isinstance(reply, list)
    return reply


def test_a_forwarded_record_is_queued_once(client: redis.Redis) -> None:
    assert _append(client, b"r1")[0] == AppendOutcome.APPENDED
    seen = KEYS.session_seen("c1", FORWARD_ID)
    assert 0 < client.pttl(seen) <= FORWARDED_SEEN_TTL_MS
    assert _append(client, b"r1") == [AppendOutcome.ALREADY_QUEUED, b"", 0]
    assert client.lrange(KEYS.session_queue("c1"), 0, -1) == [b"r1"]
    # another message, and the same message for another session, are queued
    assert _append(client, b"r2", "a-0/7/f13")[0] == AppendOutcome.APPENDED
    client.set(KEYS.session_owner("c2"), '{"node_id":"b-0","epoch":4}')
    assert _append(client, b"r1", client_id="c2")[0] == AppendOutcome.APPENDED
    assert client.llen(KEYS.session_queue("c1")) == 2
    assert client.llen(KEYS.session_queue("c2")) == 1


def test_acknowledged_records_are_not_queued_again(client: redis.Redis) -> None:
    assert _append(client, b"r1")[0] == AppendOutcome.APPENDED
    client.lrem(KEYS.session_queue("c1"), 1, "r1")  # the subscriber acknowledged it
    assert _append(client, b"r1")[0] == AppendOutcome.ALREADY_QUEUED
    assert client.llen(KEYS.session_queue("c1")) == 0


def test_the_marker_counts_before_the_owner(client: redis.Redis) -> None:
    """A copy recorded by the old owner is not sent on to the new one either."""
    assert _append(client, b"r1")[0] == AppendOutcome.APPENDED
    client.set(KEYS.session_owner("c1"), '{"node_id":"c-0","epoch":1}')  # claimed elsewhere
    assert _append(client, b"r1")[0] == AppendOutcome.ALREADY_QUEUED
    assert _append(client, b"r3", "a-0/7/f14") == [AppendOutcome.MOVED, b"c-0", 1]
    assert not client.exists(KEYS.session_seen("c1", "a-0/7/f14"))  # refused: no marker


def test_a_marker_written_by_the_receiver_counts(client: redis.Redis) -> None:
    """The receiving node's own record (RPUSH + SET PX in one pipeline) is what the sender's
    replay finds."""
    with client.pipeline(transaction=False) as pipe:
        pipe.rpush(KEYS.session_queue("c1"), b"r1")
        pipe.set(KEYS.session_seen("c1", FORWARD_ID), b"1", px=FORWARDED_SEEN_TTL_MS)
        pipe.execute()
    assert _append(client, b"r1-replayed")[0] == AppendOutcome.ALREADY_QUEUED
    assert client.lrange(KEYS.session_queue("c1"), 0, -1) == [b"r1"]


def test_records_without_a_forward_id_are_always_appended(client: redis.Redis) -> None:
    assert _append(client, b"r1", "")[0] == AppendOutcome.APPENDED
    assert _append(client, b"r1", "")[0] == AppendOutcome.APPENDED
    assert client.llen(KEYS.session_queue("c1")) == 2
    assert not client.keys(f"{KEYS.prefix}session:seen:*")


def test_seen_key_shape() -> None:
    assert KEYS.session_seen("c:1", "a-0/7/f12") == "xmq:v1:{t-append}:session:seen:a-0/7/f12:c:1"


def _lease(client: redis.Redis, node: str, epoch: int) -> None:
    write_lease(client, KEYS, node, epoch, ttl_ms=10_000)


def _fenced_append(
    client: redis.Redis, record: bytes, writer: tuple[str, int], owner: tuple[str, int] = DEAD
) -> list[object]:
    script, keys, args = append_if_owner(KEYS, "c1", owner, record, "", writer=writer)
    reply = client.eval(script, len(keys), *keys, *args)
    assert isinstance(reply, list)
    return reply


def test_a_writer_without_its_lease_is_fenced(client: redis.Redis) -> None:
    assert _fenced_append(client, b"r1", ("a-0", 7)) == [AppendOutcome.WRITER_FENCED, b"", 0]
    _lease(client, "a-0", 8)  # a newer run of the writer's node id
    assert _fenced_append(client, b"r1", ("a-0", 7))[0] == AppendOutcome.WRITER_FENCED
    assert client.llen(KEYS.session_queue("c1")) == 0
    _lease(client, "a-0", 7)
    assert _fenced_append(client, b"r1", ("a-0", 7))[0] == AppendOutcome.APPENDED
    assert client.lrange(KEYS.session_queue("c1"), 0, -1) == [b"r1"]


def test_the_queue_of_a_session_whose_owner_holds_its_lease_is_not_appended_to(
    client: redis.Redis,
) -> None:
    """A dropped link is not a dead node: the owner's live lease sends the message to it."""
    _lease(client, "a-0", 7)
    _lease(client, "b-0", 4)  # the owner the writer believed dead is alive
    assert _fenced_append(client, b"r1", ("a-0", 7)) == [AppendOutcome.MOVED, b"b-0", 4]
    assert client.llen(KEYS.session_queue("c1")) == 0
    _lease(client, "b-0", 5)  # its node restarted: the run that owns the session is dead
    assert _fenced_append(client, b"r1", ("a-0", 7))[0] == AppendOutcome.APPENDED
    # the owner appending for a session of its own that is not attached: allowed
    client.set(KEYS.session_owner("c1"), '{"node_id":"a-0","epoch":7}')
    assert _fenced_append(client, b"r2", ("a-0", 7), ("a-0", 7))[0] == AppendOutcome.APPENDED
    assert client.llen(KEYS.session_queue("c1")) == 2
