"""Deferred commands (an acknowledged record's removal): they wait for another command's flush
and keep their place; alone they go ``LAZY_FLUSH_S`` later."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.redis_server import RedisServer, running_redis
from xmq.core.turn_flush import TurnFlush
from xmq.store.redis_batcher import LAZY_FLUSH_S, RedisBatcher, ScriptCall, script_call
from xmq.store.resp_connection import encode_command

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with running_redis() as running:
        yield running


def _idle(batcher: RedisBatcher) -> bool:
    return batcher.idle


async def _answered(batcher: RedisBatcher, *args: Any) -> Any:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    batcher.command(*args, callback=future.set_result)
    async with asyncio.timeout(5):
        return await future


async def test_a_deferred_command_alone_goes_after_the_bound(server: RedisServer) -> None:
    batcher = RedisBatcher(server.url)
    await batcher.start()
    sync = server.client()
    try:
        sync.rpush("d1", b"a", b"b")
        args = ("LREM", "d1", 1, b"a")
        batcher.deferred(args, encode_command(args))
        assert not batcher.idle
        await asyncio.sleep(LAZY_FLUSH_S / 4)
        assert batcher.pipelines == 0  # not on its own tick
        assert sync.lrange("d1", 0, -1) == [b"a", b"b"]
        for _ in range(500):  # the bound's timer, then Redis's reply (5 s at most)
            if _idle(batcher):
                break
            await asyncio.sleep(0.01)
        assert _idle(batcher)
        assert (batcher.pipelines, batcher.commands) == (1, 1)
        assert sync.lrange("d1", 0, -1) == [b"b"]
    finally:
        sync.close()
        await batcher.close()


async def test_deferred_commands_ride_with_the_next_flush_in_their_place(
    server: RedisServer,
) -> None:
    batcher = RedisBatcher(server.url)
    await batcher.start()
    sync = server.client()
    try:
        sync.rpush("d2", b"x")
        batcher.deferred(("LREM", "d2", 1, b"x"))
        batcher.deferred(("HSET", "d2h", "f", "old"))
        await asyncio.sleep(0)
        assert batcher.pipelines == 0
        # a later command on the same keys: it goes in the same pipeline, after them
        assert await _answered(batcher, "RPUSH", "d2", b"x") == 1  # the LREM went first
        assert await _answered(batcher, "HGET", "d2h", "f") == b"old"
        assert batcher.pipelines == 2  # the deferred ones took no round trip of their own
        assert batcher.commands == 4
        await asyncio.sleep(LAZY_FLUSH_S * 2)  # the bound's timer finds nothing left: no more
        assert batcher.pipelines == 2
        assert batcher.idle
    finally:
        sync.close()
        await batcher.close()


_EACH_SEES_ALL = "local out = {} for i = 1, #ARGV do out[i] = #ARGV end return out"


def _each_sees_all(group: Any, items: list[Any], once: bool, bare: bool) -> ScriptCall:
    """One script call for the items: each item's reply is how many the call carried."""
    return script_call(_EACH_SEES_ALL, (), tuple(items))


async def test_a_deferred_write_rides_in_its_group_s_next_call_or_goes_after_the_bound(
    server: RedisServer,
) -> None:
    """An acknowledged record's removal (``deferred_coalesced``): no flush of its own; in the
    next script call of its group, or alone in one once its bound has passed."""
    batcher = RedisBatcher(server.url)
    await batcher.start()
    replies: list[Any] = []
    try:
        batcher.deferred_coalesced(_each_sees_all, "g", b"a", ("k1",), replies.append)
        await asyncio.sleep(LAZY_FLUSH_S / 4)
        assert (batcher.pipelines, batcher.settled) == (0, True)
        batcher.coalesced(_each_sees_all, "g", b"b", ("k2",), replies.append)
        assert not batcher.settled
        await batcher.flush()
        assert replies == [2, 2]  # one call carried both
        pipelines = batcher.pipelines
        batcher.deferred_coalesced(_each_sees_all, "g", b"c", ("k1",), replies.append)
        await asyncio.sleep(LAZY_FLUSH_S / 4)
        assert batcher.pipelines == pipelines  # not on its own tick
        for _ in range(500):  # the bound's timer, then Redis's reply (5 s at most)
            if _idle(batcher):
                break
            await asyncio.sleep(0.01)
        assert replies == [2, 2, 1]
        assert batcher.pipelines == pipelines + 1
    finally:
        await batcher.close()


async def test_flush_writes_the_deferred_commands(server: RedisServer) -> None:
    """What a takeover or a shutdown awaits: the deferred removals are in Redis."""
    batcher = RedisBatcher(server.url)
    await batcher.start()
    sync = server.client()
    try:
        sync.rpush("d3", b"a")
        batcher.deferred(("LREM", "d3", 1, b"a"))
        async with asyncio.timeout(LAZY_FLUSH_S / 2):
            await batcher.flush()
        assert sync.llen("d3") == 0
        assert batcher.pipelines == 1  # the LREM and the PING together
    finally:
        sync.close()
        await batcher.close()


async def test_a_deferred_command_queued_after_a_flush_waits_its_own_bound(
    server: RedisServer,
) -> None:
    """The bound's timer outlives the flush that carried the command it was armed for: firing,
    it leaves a command queued since alone (no extra round trip) until that one's bound."""
    batcher = RedisBatcher(server.url)
    await batcher.start()
    sync = server.client()
    loop = asyncio.get_running_loop()
    try:
        sync.rpush("d4", b"a", b"b")
        batcher.deferred(("LREM", "d4", 1, b"a"))  # arms the bound's timer
        await asyncio.sleep(LAZY_FLUSH_S * 0.3)
        assert await _answered(batcher, "PING") == b"PONG"  # carries the first LREM
        assert batcher.pipelines == 1
        assert batcher.settled
        await asyncio.sleep(LAZY_FLUSH_S * 0.2)
        queued = loop.time()
        batcher.deferred(("LREM", "d4", 1, b"b"))
        assert batcher.settled  # only a deferred removal waits: nothing to confirm
        assert not batcher.idle
        # the timer armed for the first fires ~0.5 bound after this one was queued
        await asyncio.sleep(LAZY_FLUSH_S * 0.75)
        assert batcher.pipelines == 1
        assert sync.lrange("d4", 0, -1) == [b"b"]
        for _ in range(500):
            if _idle(batcher):
                break
            await asyncio.sleep(0.01)
        assert _idle(batcher)
        assert loop.time() - queued >= LAZY_FLUSH_S * 0.99
        assert (batcher.pipelines, batcher.commands) == (2, 3)
        assert sync.llen("d4") == 0
    finally:
        sync.close()
        await batcher.close()


async def test_a_command_waited_for_is_not_settled(server: RedisServer) -> None:
    """``settled`` (what a node link's confirmation checks) is False while a command other
    than a deferred removal is queued or in flight."""
    batcher = RedisBatcher(server.url)
    await batcher.start()
    try:
        batcher.deferred(("LREM", "d5", 1, b"a"))
        batcher.command("RPUSH", "d5", b"x")
        assert not batcher.settled
        await asyncio.sleep(0)  # the flush: both in flight
        assert batcher.inflight == 2
        assert not batcher.settled
        await batcher.flush()
        assert (batcher.settled, batcher.idle) == (True, True)  # (a property: not narrowed)
    finally:
        await batcher.close()


async def test_with_a_turn_the_bound_starts_at_the_latest_read_and_still_holds(
    server: RedisServer,
) -> None:
    """A broker's batcher reads in turns: a deferred command's bound starts at the latest Redis
    read's time (no clock read), never later than the command was queued, so it still goes
    within ``LAZY_FLUSH_S`` of it (sooner by the time since that read)."""
    loop = asyncio.get_running_loop()
    batcher = RedisBatcher(server.url, turn=TurnFlush(loop))
    await batcher.start()
    sync = server.client()
    try:
        sync.rpush("d6", b"a", b"b")
        batcher.deferred(("LREM", "d6", 1, b"a"))  # arms the bound's timer
        await asyncio.sleep(LAZY_FLUSH_S * 0.3)
        assert await _answered(batcher, "PING") == b"PONG"  # carries it: a read of the turn
        read = loop.time()
        sent = batcher.pipelines  # (1: the PING carried it; 2 if a loaded loop let it go alone)
        await asyncio.sleep(LAZY_FLUSH_S * 0.2)
        queued = loop.time()
        batcher.deferred(("LREM", "d6", 1, b"b"))
        for _ in range(1000):
            if _idle(batcher):
                break
            await asyncio.sleep(0.002)
        gone = loop.time()
        assert (batcher.pipelines, batcher.commands) == (sent + 1, sent + 2)
        assert sync.llen("d6") == 0
        assert gone - queued <= LAZY_FLUSH_S + 0.5  # its bound (+ the reply on a loaded CI loop)
        assert gone - read >= LAZY_FLUSH_S * 0.5  # (not at once: the bound from the read)
    finally:
        sync.close()
        await batcher.close()
