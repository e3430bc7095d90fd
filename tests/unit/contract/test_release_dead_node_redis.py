"""The dead-node release script run on a real redis-server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.support.redis_server import running_redis
from xmq.contract import (
    CleanupOutcome,
    CleanupResult,
    ClusterKeys,
    NodeLease,
    release_dead_node,
)

pytestmark = pytest.mark.integration

KEYS = ClusterKeys("t1")


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with running_redis() as server:
        yield server.url


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    connection.flushall()
    yield connection
    connection.close()


def _register(client: redis.Redis, node_id: str, pod_uid: str, sessions: list[str]) -> NodeLease:
    """Seed Redis the way a starting broker node does: epoch, lease, member, sessions."""
    epoch = int(client.incr(KEYS.node_epoch(node_id)))
    pod_name = node_id.rsplit("-", 1)[0]
    lease = NodeLease(
        node_id=node_id,
        pod_name=pod_name,
        pod_uid=pod_uid,
        address="127.0.0.1:7884",
        epoch=epoch,
        started_at=1700000000.0,
    )
    client.set(KEYS.lease(node_id), lease.to_json(), px=10_000)
    client.sadd(KEYS.members(), node_id)
    if sessions:
        client.sadd(KEYS.node_sessions(node_id), *sessions)
    return lease


def _release(
    client: redis.Redis, node_id: str, pod_uid: str, epoch: int | None = None
) -> CleanupResult:
    call = release_dead_node(KEYS, node_id, pod_uid, epoch)
    return CleanupResult.from_reply(
        client.eval(call.script, len(call.keys), *call.keys, *call.args)
    )


def test_a_dead_pods_lease_is_deleted_and_its_sessions_orphaned(client: redis.Redis) -> None:
    dead = _register(client, "xmq-0-0", "uid-dead", ["c1", "c2", "c3"])
    live = _register(client, "xmq-1-0", "uid-live", ["c9"])

    result = _release(client, "xmq-0-0", "uid-dead", dead.epoch)

    assert result == CleanupResult(CleanupOutcome.LEASE_DELETED, 3)
    assert client.get(KEYS.lease("xmq-0-0")) is None
    assert client.smembers(KEYS.orphaned_sessions()) == {"c1", "c2", "c3"}
    assert not client.exists(KEYS.node_sessions("xmq-0-0"))
    assert client.smembers(KEYS.members()) == {"xmq-1-0"}
    # The live node is untouched.
    assert NodeLease.from_json(str(client.get(KEYS.lease("xmq-1-0")))) == live
    assert client.smembers(KEYS.node_sessions("xmq-1-0")) == {"c9"}


def test_a_live_replacement_with_another_uid_is_never_deleted(client: redis.Redis) -> None:
    _register(client, "xmq-0-0", "uid-old", ["c1"])
    replacement = _register(client, "xmq-0-0", "uid-new", ["c1", "c2"])

    result = _release(client, "xmq-0-0", "uid-old")

    assert result == CleanupResult(CleanupOutcome.LEASE_IS_OTHER, 0)
    assert NodeLease.from_json(str(client.get(KEYS.lease("xmq-0-0")))) == replacement
    assert client.smembers(KEYS.node_sessions("xmq-0-0")) == {"c1", "c2"}
    assert client.sismember(KEYS.members(), "xmq-0-0")
    assert not client.exists(KEYS.orphaned_sessions())


def test_a_restarted_container_with_the_same_uid_but_newer_epoch_is_kept(
    client: redis.Redis,
) -> None:
    old = _register(client, "xmq-0-0", "uid-same", ["c1"])
    restarted = _register(client, "xmq-0-0", "uid-same", ["c1"])
    assert restarted.epoch == old.epoch + 1

    result = _release(client, "xmq-0-0", "uid-same", old.epoch)

    assert result.outcome is CleanupOutcome.LEASE_IS_OTHER
    assert NodeLease.from_json(str(client.get(KEYS.lease("xmq-0-0")))) == restarted


def test_an_expired_lease_still_orphans_the_sessions(client: redis.Redis) -> None:
    dead = _register(client, "xmq-2-1", "uid-gone", ["c5"])
    client.delete(KEYS.lease("xmq-2-1"))  # the TTL ran out

    result = _release(client, "xmq-2-1", "uid-gone", dead.epoch)

    assert result == CleanupResult(CleanupOutcome.NO_LEASE, 1)
    assert client.smembers(KEYS.orphaned_sessions()) == {"c5"}
    assert not client.sismember(KEYS.members(), "xmq-2-1")


def test_a_newer_run_that_has_not_written_its_lease_yet_is_not_touched(
    client: redis.Redis,
) -> None:
    dead = _register(client, "xmq-2-1", "uid-gone", ["c5"])
    client.delete(KEYS.lease("xmq-2-1"))
    client.incr(KEYS.node_epoch("xmq-2-1"))  # a replacement is starting

    result = _release(client, "xmq-2-1", "uid-gone", dead.epoch)

    assert result == CleanupResult(CleanupOutcome.NEWER_RUN, 0)
    assert client.smembers(KEYS.node_sessions("xmq-2-1")) == {"c5"}


def test_running_the_cleanup_twice_is_harmless(client: redis.Redis) -> None:
    dead = _register(client, "xmq-0-0", "uid-dead", ["c1"])
    first = _release(client, "xmq-0-0", "uid-dead", dead.epoch)
    second = _release(client, "xmq-0-0", "uid-dead", dead.epoch)
    assert first.outcome is CleanupOutcome.LEASE_DELETED
    assert second == CleanupResult(CleanupOutcome.NO_LEASE, 0)
    assert client.smembers(KEYS.orphaned_sessions()) == {"c1"}


def test_a_node_owning_many_sessions_is_released_in_one_call(client: redis.Redis) -> None:
    sessions = [f"client-{i}" for i in range(2500)]
    dead = _register(client, "xmq-0-0", "uid-dead", sessions)
    result = _release(client, "xmq-0-0", "uid-dead", dead.epoch)
    assert result == CleanupResult(CleanupOutcome.LEASE_DELETED, 2500)
    assert client.scard(KEYS.orphaned_sessions()) == 2500


def test_a_malformed_lease_is_reported_not_deleted(client: redis.Redis) -> None:
    client.set(KEYS.lease("xmq-0-0"), "not json")
    with pytest.raises(redis.ResponseError, match="malformed lease"):
        _release(client, "xmq-0-0", "uid")
    assert client.get(KEYS.lease("xmq-0-0")) == "not json"


def test_a_dead_pod_with_several_workers_loses_every_lease(client: redis.Redis) -> None:
    """``workers: 3``: three node ids ``<pod>-0..2`` share the pod UID; the operator's cleanup
    (snapshot, then one compare-and-delete per node) releases all three, and only those."""
    from xmq_operator.dead_pods import releases_for_deleted_pod
    from xmq_operator.redis_state import ClusterRedis

    for worker in range(3):
        _register(client, f"xmq-0-{worker}", "uid-pod0", [f"w{worker}-a", f"w{worker}-b"])
    live = _register(client, "xmq-1-0", "uid-pod1", ["other"])
    state = ClusterRedis(client, KEYS)
    snapshot = state.snapshot()
    releases = releases_for_deleted_pod(
        "xmq-0", "uid-pod0", snapshot.leases, snapshot.members, "pod deleted"
    )
    results = [state.release(r.node_id, r.pod_uid, r.epoch) for r in releases]

    assert [r.node_id for r in releases] == ["xmq-0-0", "xmq-0-1", "xmq-0-2"]
    assert results == [CleanupResult(CleanupOutcome.LEASE_DELETED, 2)] * 3
    assert client.smembers(KEYS.members()) == {"xmq-1-0"}
    assert client.scard(KEYS.orphaned_sessions()) == 6
    assert state.snapshot().leases == (live,)


def test_a_worker_restarted_by_its_supervisor_is_not_released_with_the_old_epoch(
    client: redis.Redis,
) -> None:
    old = _register(client, "xmq-0-1", "uid-pod0", ["a"])
    _register(client, "xmq-0-1", "uid-pod0", [])  # the supervisor restarted the worker
    assert _release(client, "xmq-0-1", "uid-pod0", old.epoch).outcome is (
        CleanupOutcome.LEASE_IS_OTHER
    )
    assert client.exists(KEYS.lease("xmq-0-1"))
