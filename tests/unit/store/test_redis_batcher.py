"""Group commit: the commands of one loop tick share one write; lost scripts are re-sent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.redis_server import RedisServer, running_redis
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.resp_connection import RedisConnectionLost, encode_command, parse_reply


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with running_redis() as running:
        yield running


def test_resp_encoding_and_nested_replies() -> None:
    assert encode_command(("SET", "k", b"v\r\n", 7)) == (
        b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nv\r\n\r\n$1\r\n7\r\n"
    )
    reply, end = parse_reply(b"*3\r\n:1\r\n$-1\r\n*1\r\n+OK\r\n", 0)
    assert reply == [1, None, [b"OK"]]
    assert end == 22


async def test_one_write_per_tick(server: RedisServer) -> None:
    batcher = RedisBatcher(server.url)
    await batcher.start()
    replies: list[Any] = []
    for n in range(500):
        batcher.command("RPUSH", "batched", n, callback=replies.append)
    await batcher.flush()  # a PING behind them: answered once all 500 are
    assert replies == list(range(1, 501))
    assert batcher.pipelines == 1  # the 500 commands and the PING: one write
    assert batcher.commands == 501
    await batcher.close()


async def test_script_reloaded_after_script_flush(server: RedisServer) -> None:
    batcher = RedisBatcher(server.url)
    await batcher.start()
    text = "return tonumber(ARGV[1]) + 1"
    assert await batcher.call_script(text, (), ("1",)) == 2
    sync = server.client()
    sync.script_flush()
    sync.close()
    assert await batcher.call_script(text, (), ("41",)) == 42
    await batcher.close()


async def test_durable_writes_survive_a_lost_connection(server: RedisServer) -> None:
    batcher = RedisBatcher(server.url)
    await batcher.start()
    sync = server.client()
    try:
        sync.client_kill_filter(_type="normal", skipme=True)
        answered = asyncio.Event()
        replies: list[Any] = []

        def done(reply: Any) -> None:
            replies.append(reply)
            answered.set()

        batcher.command("SET", "after-loss", "1", callback=done)
        async with asyncio.timeout(5):
            await answered.wait()
        assert replies == [b"OK"]  # retried on the new connection, never failed
        assert sync.get("after-loss") == b"1"
    finally:
        sync.close()
        await batcher.close()


async def test_connect_path_fails_fast_without_redis() -> None:
    batcher = RedisBatcher("redis://127.0.0.1:1/0", timeout_s=0.5)
    with pytest.raises(OSError):
        await batcher.start()
    with pytest.raises(RedisConnectionLost):
        await batcher.call_script("return 1", (), ())
    await batcher.close()
