"""The records and inbound QoS 2 ids of one batcher flush go to a real Redis in ONE fenced
script call (``FENCED_WRITES``): the lease is checked once per batch, as strongly as per record.

A batch from a stale run writes nothing and fails every hold in it; a batch from the current
run writes each record in order and releases each hold; a batch cut off by a lost connection is
sent again with every push made push-if-absent (never queued twice).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from tests.support.node_leases import drop_lease, write_lease
from tests.support.redis_server import RedisServer
from tests.unit.store.test_fenced_records import Hold, server, sync  # noqa: F401 - fixtures
from tests.unit.store.test_redis_retries import (  # noqa: F401 - the fixture
    ScriptedRedis,
    _batcher,
    batchers,
    hangs_up_once,
)
from xmq.contract import ClusterKeys
from xmq.contract.message_record import decode_record
from xmq.contract.session_scripts import FENCED_WRITES, FencedWrite, fenced_writes
from xmq.core.cluster_ports import DurableContext, NodeIdentity
from xmq.core.message import Message
from xmq.core.session import QueueLimits, Session
from xmq.core.stats import BrokerStats
from xmq.store.redis_batcher import RedisBatcher, ScriptCall, script_call
from xmq.store.redis_session_store import RedisSessionStore

pytestmark = pytest.mark.integration

KEYS = ClusterKeys("t-batches")
NODE = ("a-0", 3)
CLIENTS = ("c1", "c2", "c3")


def _script_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(
        int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval")
    )


async def _publish_batch(
    server: RedisServer,  # noqa: F811 - the fixture's value
    sync: redis.Redis,  # noqa: F811 - the fixture's value
    records: int,
) -> tuple[list[Hold], int, RedisSessionStore]:
    """``records`` QoS 2 records (over three sessions, one of them forwarded) and one inbound
    id, all queued in one loop turn, each with its own hold; returns the holds and the number
    of script calls Redis ran for them."""
    batcher = RedisBatcher(server.url)
    await batcher.start()
    store = RedisSessionStore(batcher, KEYS, NodeIdentity(*NODE, online=True), {}, lambda: 0.0)
    limits = QueueLimits(1000, 1 << 20, 1 << 24, 10)
    sessions = [Session(client, limits, BrokerStats()) for client in CLIENTS]
    for session in sessions:
        session.store = store
    holds = [Hold() for _ in range(records + 1)]
    try:
        sync.script_load(FENCED_WRITES)  # as the node does at start: no EVAL fallback
        sync.config_resetstat()
        for n in range(records):
            message = Message("t", b"m%d" % n, 2, False, None, "p1", 0.0)
            forward = f"b-0/1/f{n}" if n % 3 == 2 else ""
            context = DurableContext(holds[n], forward)
            sessions[n % 3].deliver(message, 2, False, (), None, 0.0, context)
        store.inbound_changed(sessions[0], 9, True, holds[-1])
        await asyncio.wait_for(store.flush(), 10)
        calls = _script_calls(sync)
    finally:
        await batcher.close()
    return holds, calls, store


async def test_a_stale_run_s_batch_writes_nothing_and_fails_every_hold(
    server: RedisServer,  # noqa: F811 - the fixture
    sync: redis.Redis,  # noqa: F811 - the fixture
) -> None:
    drop_lease(sync, KEYS, NODE[0])  # expired while Redis was paused,
    write_lease(sync, KEYS, NODE[0], NODE[1] + 1)  # and a newer run of the node holds one now
    holds, calls, store = await _publish_batch(server, sync, 30)
    assert calls == 1  # the whole batch: one call, refused at its lease check
    assert [(h.count, h.released, h.failed) for h in holds] == [(1, 0, 1)] * 31
    assert store.failed == 30
    for client in CLIENTS:
        assert not sync.exists(KEYS.session_queue(client))
    assert not sync.exists(KEYS.session_qos2_inbound("c1"))
    assert not sync.keys(KEYS.session_seen("*", "*"))


async def test_a_batch_of_n_records_is_one_call_written_in_order(
    server: RedisServer,  # noqa: F811 - the fixture
    sync: redis.Redis,  # noqa: F811 - the fixture
) -> None:
    write_lease(sync, KEYS, *NODE)
    holds, calls, store = await _publish_batch(server, sync, 30)
    assert calls == 1
    assert [(h.count, h.released, h.failed) for h in holds] == [(1, 1, 0)] * 31
    for k, client in enumerate(CLIENTS):
        queue: list[bytes] = sync.lrange(KEYS.session_queue(client), 0, -1)  # type: ignore[assignment]
        payloads = [bytes(decode_record(record).payload) for record in queue]
        assert payloads == [b"m%d" % n for n in range(k, 30, 3)]  # in the order they were made
    assert sync.smembers(KEYS.session_qos2_inbound("c1")) == {b"9"}
    assert len(sync.keys(KEYS.session_seen("c3", "*"))) == 10  # forwarded: marked


def test_a_batch_sent_again_pushes_only_what_is_not_there(
    sync: redis.Redis,  # noqa: F811 - the fixture
) -> None:
    write_lease(sync, KEYS, *NODE)
    queue, seen = KEYS.session_queue("c1"), KEYS.session_seen("c1", "b-0/1/f2")
    writes: list[FencedWrite] = [
        ("r", queue, b"r1", "", ""),
        ("i", KEYS.session_qos2_inbound("p1"), "7", "", ""),
        ("r", queue, b"r2", seen, ""),
    ]
    script, keys, args = fenced_writes(KEYS, NODE, writes)
    assert sync.eval(script, len(keys), *keys, *args) == [1, 1, 1]
    script, keys, args = fenced_writes(KEYS, NODE, writes, once=True)  # cut off, sent again
    assert sync.eval(script, len(keys), *keys, *args) == [1, 0, 1]
    assert sync.lrange(KEYS.session_queue("c1"), 0, -1) == [b"r1", b"r2"]
    assert sync.smembers(KEYS.session_qos2_inbound("p1")) == {b"7"}
    assert sync.exists(KEYS.session_seen("c1", "b-0/1/f2"))


async def test_a_coalesced_call_cut_by_a_lost_connection_is_sent_again_as_its_lost_form(
    batchers: list[RedisBatcher],  # noqa: F811 - the fixture
) -> None:
    scripted = ScriptedRedis(hangs_up_once(b"*2\r\n:1\r\n:0\r\n"))  # the call unanswered
    batcher = await _batcher(batchers, await scripted.start())

    def combine(group: Any, items: list[Any], once: bool, bare: bool) -> ScriptCall:
        return script_call("-- batch", (group,), (*items, "1" if once else "0"))

    replies: list[Any] = []
    for item in ("a", "b"):
        batcher.coalesced(combine, "q", item, ("q",), replies.append)
    await asyncio.wait_for(batcher.flush(), 10)
    assert replies == [1, 0]  # each item its own element of the one reply
    calls = [command for command in scripted.seen if command[0] == b"EVALSHA"]
    assert [call[3:] for call in calls] == [[b"q", b"a", b"b", b"0"], [b"q", b"a", b"b", b"1"]]


async def test_a_command_naming_a_key_of_the_call_ends_it_before_that_command(
    batchers: list[RedisBatcher],  # noqa: F811 - the fixture
) -> None:
    def script(command: list[bytes], fake: ScriptedRedis) -> bytes | None:
        if command[0] == b"EVALSHA":
            count = int(command[2])
            return b"*%d\r\n" % (len(command) - 3 - count) + b":1\r\n" * (len(command) - 3 - count)
        return b":1\r\n"

    scripted = ScriptedRedis(script)
    batcher = await _batcher(batchers, await scripted.start())

    def combine(group: Any, items: list[Any], once: bool, bare: bool) -> ScriptCall:
        return script_call("-- batch", (group,), tuple(items))

    replies: list[Any] = []
    batcher.coalesced(combine, "g", "a", ("q1",), replies.append)
    batcher.command("LREM", "q2", 1, b"x")  # another key: the call takes "b" across it
    batcher.coalesced(combine, "g", "b", ("q1",), replies.append)
    batcher.command("LREM", "q1", 1, b"a")  # a key of the call: "a" and "b" go before it
    batcher.coalesced(combine, "g", "c", ("q1",), replies.append)
    await asyncio.wait_for(batcher.flush(), 10)
    assert replies == [1, 1, 1]
    sent = [command[:2] if command[0] == b"LREM" else command[3:] for command in scripted.seen]
    assert sent[:4] == [[b"g", b"a", b"b"], [b"LREM", b"q2"], [b"LREM", b"q1"], [b"g", b"c"]]


async def test_a_coalesced_call_sent_bare_is_sent_again_as_eval_with_its_arguments(
    batchers: list[RedisBatcher],  # noqa: F811 - the fixture
) -> None:
    def script(command: list[bytes], fake: ScriptedRedis) -> bytes:
        if command[0] == b"EVALSHA":
            return b"-NOSCRIPT No matching script. Please use EVAL.\r\n"
        return b"*2\r\n:1\r\n:0\r\n" if command[0] == b"EVAL" else b"+PONG\r\n"

    scripted = ScriptedRedis(script)
    batcher = await _batcher(batchers, await scripted.start())
    asked: list[bool] = []

    def combine(group: Any, items: list[Any], once: bool, bare: bool) -> ScriptCall:
        asked.append(bare)
        text, command, payload = script_call("-- batch", (group,), (*items, "1" if once else "0"))
        return (text, (), payload) if bare else (text, command, payload)

    replies: list[Any] = []
    for item in ("a", "b"):
        batcher.coalesced(combine, "q", item, ("q",), replies.append)
    await asyncio.sleep(0)  # the flush: the two writes are one command, alone in its pipeline
    assert (batcher.pipelines, batcher.commands) == (1, 1)
    await asyncio.wait_for(batcher.flush(), 10)
    assert replies == [1, 0]  # each item its own element of the one reply
    assert asked == [True, False]  # sent bare (one command); its arguments built for the EVAL
    calls = [command for command in scripted.seen if command[0] != b"PING"]
    assert [call[0] for call in calls] == [b"EVALSHA", b"EVAL"]
    assert calls[1][1:] == [b"-- batch", b"1", b"q", b"a", b"b", b"0"]
