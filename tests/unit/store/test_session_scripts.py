"""Session ownership scripts against a real Redis: claim, takeover, dead owners, appends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.support.node_leases import drop_lease, write_lease
from tests.support.redis_server import running_redis
from xmq.contract import ClusterKeys
from xmq.contract.records import SessionOwner
from xmq.contract.scripts import ScriptCall
from xmq.contract.session_replies import ClaimOutcome, ClaimReply, ReleaseOutcome
from xmq.contract.session_scripts import (
    append_if_owner,
    claim_session,
    release_session,
)

pytestmark = pytest.mark.integration  # a real Redis

KEYS = ClusterKeys("unit")


@pytest.fixture(scope="module")
def client() -> Iterator[redis.Redis]:
    with running_redis() as server:
        connection = server.client()
        yield connection
        connection.close()


def _run(client: redis.Redis, call: ScriptCall) -> object:
    return client.eval(call.script, len(call.keys), *call.keys, *call.args)


def _claim(
    client: redis.Redis,
    client_id: str,
    node: str,
    epoch: int,
    clean: bool = False,
    expected: tuple[str, int] | None = None,
    identity: str = "",
    refuse_foreign: bool = True,
) -> ClaimReply:
    call = claim_session(
        KEYS,
        client_id,
        node,
        epoch,
        clean_start=clean,
        durable=True,
        want_state=True,
        protocol_version=5,
        expiry_interval=60,
        expected=expected,
        identity=identity,
        refuse_foreign=refuse_foreign,
    )
    return ClaimReply.from_reply(_run(client, call))


def _lease(client: redis.Redis, node: str, epoch: int) -> None:
    write_lease(client, KEYS, node, epoch)


def _claim_then_die(
    client: redis.Redis, client_id: str, node: str, epoch: int, identity: str = ""
) -> None:
    """``node`` (run ``epoch``) claims ``client_id`` while it holds its lease, then dies."""
    _lease(client, node, epoch)
    claim = _claim(client, client_id, node, epoch, identity=identity)
    assert claim.outcome != ClaimOutcome.FENCED
    drop_lease(client, KEYS, node)


def test_first_claim_and_reclaim_by_the_owner(client: redis.Redis) -> None:
    _lease(client, "a-0", 1)
    first = _claim(client, "c1", "a-0", 1)
    assert first.outcome == ClaimOutcome.CLAIMED
    assert client.sismember(KEYS.node_sessions("a-0"), "c1")
    again = _claim(client, "c1", "a-0", 1)
    assert again.outcome == ClaimOutcome.RESTORED  # state hash exists: the stored copy comes back
    assert again.stored is not None


def test_live_owner_is_reported_then_handed_over(client: redis.Redis) -> None:
    _lease(client, "a-0", 1)
    _lease(client, "b-0", 1)
    _claim(client, "c2", "a-0", 1)
    client.rpush(KEYS.session_queue("c2"), b"rec-1")
    client.hset(KEYS.session_subscriptions("c2"), "t", '{"f":"t","q":1}')
    refused = _claim(client, "c2", "b-0", 1)
    assert refused.outcome == ClaimOutcome.OWNED_ELSEWHERE
    assert (refused.owner_node, refused.owner_epoch) == ("a-0", 1)
    taken = _claim(client, "c2", "b-0", 1, expected=("a-0", 1))
    assert taken.outcome == ClaimOutcome.RESTORED
    assert taken.stored is not None
    assert taken.stored.queue == [b"rec-1"]
    assert taken.stored.subscriptions == {"t": b'{"f":"t","q":1}'}
    assert not client.sismember(KEYS.node_sessions("a-0"), "c2")
    assert client.sismember(KEYS.node_sessions("b-0"), "c2")


def test_dead_owner_claim_is_taken_directly(client: redis.Redis) -> None:
    _lease(client, "b-0", 1)
    _claim_then_die(client, "c3", "d-0", 5)  # d-0 holds no lease at all now
    assert _claim(client, "c3", "b-0", 1).outcome == ClaimOutcome.RESTORED
    _claim_then_die(client, "c4", "d-0", 5)
    _lease(client, "d-0", 6)  # a newer run of d-0: the epoch-5 claim is dead too
    assert _claim(client, "c4", "b-0", 1).outcome != ClaimOutcome.OWNED_ELSEWHERE


def test_clean_start_discards_the_stored_session(client: redis.Redis) -> None:
    _lease(client, "a-0", 1)
    _claim(client, "c5", "a-0", 1)
    client.rpush(KEYS.session_queue("c5"), b"old")
    reply = _claim(client, "c5", "a-0", 1, clean=True)
    assert reply.outcome == ClaimOutcome.CLAIMED
    assert client.llen(KEYS.session_queue("c5")) == 0


def test_release_only_by_the_owner(client: redis.Redis) -> None:
    _lease(client, "a-0", 1)
    _lease(client, "b-0", 1)  # a live run that is not the owner (without a lease: fenced, 2)
    _claim(client, "c6", "a-0", 1)
    assert _run(client, release_session(KEYS, "c6", "b-0", 1)) == 0
    assert client.exists(KEYS.session_owner("c6"))
    assert _run(client, release_session(KEYS, "c6", "a-0", 1)) == 1
    assert not client.exists(KEYS.session_owner("c6"), KEYS.session_state("c6"))


def test_append_only_while_the_dead_owner_still_owns(client: redis.Redis) -> None:
    _claim_then_die(client, "c7", "d-0", 2)
    script, keys, args = append_if_owner(KEYS, "c7", ("d-0", 2), b"m1")
    assert client.eval(script, len(keys), *keys, *args) == [0, b"", 0]
    _lease(client, "b-0", 1)
    _claim(client, "c7", "b-0", 1)
    script, keys, args = append_if_owner(KEYS, "c7", ("d-0", 2), b"m2")
    assert client.eval(script, len(keys), *keys, *args) == [1, b"b-0", 1]
    assert client.lrange(KEYS.session_queue("c7"), 0, -1) == [b"m1"]


def test_another_identity_never_inherits_a_live_session(client: redis.Redis) -> None:
    _lease(client, "a-0", 1)
    _lease(client, "b-0", 1)
    _claim(client, "i1", "a-0", 1, identity="user:b")
    owner_before = client.get(KEYS.session_owner("i1"))
    assert SessionOwner.from_json(owner_before or b"").identity == "user:b"
    assert client.hget(KEYS.session_state("i1"), "identity") == b"user:b"
    client.rpush(KEYS.session_queue("i1"), b"for-b")
    refused = _claim(client, "i1", "b-0", 1, identity="user:a")
    assert refused.outcome == ClaimOutcome.FOREIGN  # not OWNED_ELSEWHERE: nobody is asked
    assert client.get(KEYS.session_owner("i1")) == owner_before  # nothing changed
    assert client.lrange(KEYS.session_queue("i1"), 0, -1) == [b"for-b"]
    assert _claim(client, "i1", "b-0", 1, identity="anonymous").outcome == ClaimOutcome.FOREIGN
    same = _claim(client, "i1", "b-0", 1, identity="user:b")
    assert same.outcome == ClaimOutcome.OWNED_ELSEWHERE  # the same user: a normal takeover


def test_another_identity_never_inherits_a_stored_session_of_a_dead_owner(
    client: redis.Redis,
) -> None:
    _lease(client, "b-0", 1)
    _claim_then_die(client, "i2", "d-0", 3, identity="user:b")  # d-0 holds no lease: dead
    client.rpush(KEYS.session_queue("i2"), b"for-b")
    assert _claim(client, "i2", "b-0", 1, identity="user:a").outcome == ClaimOutcome.FOREIGN
    resumed = _claim(client, "i2", "b-0", 1, identity="user:b")
    assert resumed.outcome == ClaimOutcome.RESTORED
    assert resumed.stored is not None and resumed.stored.queue == [b"for-b"]


def test_the_clean_start_policy_discards_another_identitys_session(client: redis.Redis) -> None:
    _lease(client, "a-0", 1)
    _claim(client, "i3", "a-0", 1, identity="user:b")
    client.rpush(KEYS.session_queue("i3"), b"for-b")
    reply = _claim(client, "i3", "a-0", 1, identity="user:a", refuse_foreign=False)
    assert reply.outcome == ClaimOutcome.CLAIMED  # started clean: nothing of b's comes back
    assert client.llen(KEYS.session_queue("i3")) == 0
    assert client.hget(KEYS.session_state("i3"), "identity") == b"user:a"


def test_a_dead_owners_ended_session_is_free_for_anyone(client: redis.Redis) -> None:
    _lease(client, "b-0", 1)
    call = claim_session(
        KEYS, "i4", "d-0", 4, clean_start=True, durable=False, want_state=False,
        protocol_version=5, expiry_interval=0, identity="user:b",
    )  # fmt: skip
    _lease(client, "d-0", 4)
    _run(client, call)  # a non-persistent session of a node that died: nothing stored
    drop_lease(client, KEYS, "d-0")
    assert _claim(client, "i4", "b-0", 1, identity="user:a").outcome == ClaimOutcome.CLAIMED


def test_records_without_an_identity_are_not_checked(client: redis.Redis) -> None:
    _lease(client, "a-0", 1)
    _claim(client, "i5", "a-0", 1)  # written without an identity (before they were recorded)
    assert _claim(client, "i5", "a-0", 1, identity="user:a").outcome == ClaimOutcome.RESTORED
    assert _claim(client, "i5", "a-0", 1, identity="user:b").outcome == ClaimOutcome.FOREIGN


def test_a_claim_by_a_run_without_its_lease_is_fenced(client: redis.Redis) -> None:
    """A node whose lease expired (paused past its TTL) or whose node id restarted since
    (a newer epoch) claims nothing, and changes nothing on the way."""
    drop_lease(client, KEYS, "f-0")
    assert _claim(client, "f1", "f-0", 7).outcome == ClaimOutcome.FENCED
    assert not client.exists(KEYS.session_owner("f1"), KEYS.session_state("f1"))
    assert not client.sismember(KEYS.node_sessions("f-0"), "f1")
    _lease(client, "b-0", 1)
    _claim(client, "f2", "b-0", 1)
    client.rpush(KEYS.session_queue("f2"), b"for-b")
    owner = client.get(KEYS.session_owner("f2"))
    _lease(client, "f-0", 8)  # f-0 restarted: the epoch-7 run is stale
    for expected in (None, ("b-0", 1)):  # even one sure it was handed the session over
        stale = _claim(client, "f2", "f-0", 7, clean=True, expected=expected)
        assert stale.outcome == ClaimOutcome.FENCED
    assert client.get(KEYS.session_owner("f2")) == owner
    assert client.lrange(KEYS.session_queue("f2"), 0, -1) == [b"for-b"]
    assert client.sismember(KEYS.node_sessions("b-0"), "f2")
    assert _claim(client, "f2", "f-0", 8, expected=("b-0", 1)).outcome == ClaimOutcome.RESTORED


def test_a_release_by_a_run_without_its_lease_is_fenced(client: redis.Redis) -> None:
    _lease(client, "g-0", 2)
    _claim(client, "g1", "g-0", 2)
    client.rpush(KEYS.session_queue("g1"), b"kept")
    drop_lease(client, KEYS, "g-0")  # paused past its lease TTL
    assert _run(client, release_session(KEYS, "g1", "g-0", 2)) == ReleaseOutcome.FENCED
    _lease(client, "g-0", 3)  # back under a new epoch: the old run's release is still stale
    assert _run(client, release_session(KEYS, "g1", "g-0", 2)) == ReleaseOutcome.FENCED
    assert client.exists(KEYS.session_owner("g1"), KEYS.session_state("g1")) == 2
    assert client.lrange(KEYS.session_queue("g1"), 0, -1) == [b"kept"]
    assert client.sismember(KEYS.node_sessions("g-0"), "g1")
    _lease(client, "g-0", 2)
    assert _run(client, release_session(KEYS, "g1", "g-0", 2)) == ReleaseOutcome.RELEASED
    assert not client.exists(KEYS.session_owner("g1"), KEYS.session_queue("g1"))
