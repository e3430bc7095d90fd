"""Group commit: the commands of one loop tick share one write; lost scripts are re-sent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.redis_server import RedisServer, running_redis
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.resp_connection import (
    RedisConnectionLost,
    RedisReplyError,
    encode_command,
    reply_reader,
)


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with running_redis() as running:
        yield running


@pytest.mark.parametrize(
    ("args", "wire"),
    [
        pytest.param(
            ("SET", "k", b"v\r\n", 7),
            b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nv\r\n\r\n$1\r\n7\r\n",
            id="str-bytes-int",
        ),
        pytest.param(("X", 1.5), b"*2\r\n$1\r\nX\r\n$3\r\n1.5\r\n", id="float"),
        pytest.param(
            ("X", bytearray(b"ab"), True),
            b"*3\r\n$1\r\nX\r\n$2\r\nab\r\n$4\r\nTrue\r\n",
            id="bytearray-and-bool-fallback",
        ),
    ],
)
def test_resp_encoding(args: tuple[Any, ...], wire: bytes) -> None:
    assert encode_command(args) == wire


def test_replies_parsed_whole_and_byte_by_byte() -> None:
    wire = b"*3\r\n:1\r\n$-1\r\n*1\r\n+OK\r\n-ERR nope\r\n$4\r\na\r\nb\r\n"
    whole = reply_reader()
    whole.feed(wire)
    replies = [whole.gets() for _ in range(4)]
    assert whole.gets() is False
    assert replies[0] == [1, None, [b"OK"]]
    assert isinstance(replies[1], RedisReplyError)
    assert str(replies[1]) == "ERR nope"
    assert replies[2:] == [b"a\r\nb", False]
    stepwise = reply_reader()
    got: list[Any] = []
    for index in range(len(wire)):
        stepwise.feed(wire[index : index + 1])
        reply = stepwise.gets()
        while reply is not False:
            got.append(reply)
            reply = stepwise.gets()
    assert [type(item) for item in got] == [list, RedisReplyError, bytes]
    assert got[0] == replies[0]
    assert got[2] == b"a\r\nb"


@pytest.mark.integration
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


@pytest.mark.integration
async def test_each_pipeline_s_round_trip_is_measured_once(server: RedisServer) -> None:
    batcher = RedisBatcher(server.url, rtt_every=1)
    await batcher.start()
    before = batcher.stats.rtt_count
    replies: list[Any] = []
    for turn in range(3):
        for n in range(4):
            batcher.command("RPUSH", "timed", n, callback=replies.append)
        await batcher.flush()  # (a pipeline of the 4 and the PING behind them, per turn)
        assert batcher.stats.rtt_count - before == turn + 1
    assert batcher.pipelines == 3
    assert len(replies) == 12
    assert batcher.stats.rtt_total > 0.0
    await batcher.close()


@pytest.mark.integration
@pytest.mark.parametrize("alone", [True, False])
async def test_one_pipeline_in_rtt_every_is_timed(server: RedisServer, alone: bool) -> None:
    batcher = RedisBatcher(server.url, rtt_every=4)
    await batcher.start()
    replies: list[Any] = []
    try:
        for turn in range(9):
            answered = asyncio.Event()

            def done(reply: Any, answered: asyncio.Event = answered) -> None:
                replies.append(reply)
                answered.set()

            if not alone:  # (two commands: the generic pipeline)
                batcher.command("RPUSH", "sampled", turn, callback=replies.append)
            batcher.command("RPUSH", "sampled", turn, callback=done)
            async with asyncio.timeout(5):
                await answered.wait()
            # the first pipeline is timed, then one in four: the 1st, 5th and 9th
            assert batcher.stats.rtt_count == 1 + turn // 4
    finally:
        await batcher.close()
    assert batcher.pipelines == 9
    assert len(replies) == (9 if alone else 18)
    assert batcher.stats.rtt_total > 0.0


@pytest.mark.integration
async def test_a_command_alone_is_its_own_pipeline_timed_and_answered(server: RedisServer) -> None:
    batcher = RedisBatcher(server.url, rtt_every=1)
    await batcher.start()
    sync = server.client()
    try:
        answered = asyncio.Event()
        replies: list[Any] = []

        def done(reply: Any) -> None:
            replies.append(reply)
            answered.set()

        batcher.command("RPUSH", "alone", b"a", b"b", callback=done)
        async with asyncio.timeout(5):
            await answered.wait()
        assert replies == [2]
        assert (batcher.pipelines, batcher.commands, batcher.stats.rtt_count) == (1, 1, 1)
        # an acknowledgement's removal: queued already encoded, nobody waits for it
        args = ("LREM", "alone", 1, b"a")
        batcher.encoded(args, encode_command(args))
        assert not batcher.idle
        await asyncio.sleep(0)  # the tick's flush: the LREM goes alone
        assert (batcher.pipelines, batcher.commands, batcher.inflight) == (2, 2, 1)
        async with asyncio.timeout(5):
            await batcher.flush()  # a PING behind it, in the next pipeline
        assert sync.lrange("alone", 0, -1) == [b"b"]
        assert (batcher.pipelines, batcher.commands, batcher.stats.rtt_count) == (3, 3, 3)
    finally:
        sync.close()
        await batcher.close()


@pytest.mark.integration
async def test_commands_queued_while_a_batch_is_out_share_the_next_write(
    server: RedisServer,
) -> None:
    batcher = RedisBatcher(server.url)
    await batcher.start()
    sync = server.client()
    sync.client_pause(300)  # the first batch stays out 0.3 s
    replies: list[Any] = []
    try:
        batcher.command("RPUSH", "nagle", 0, callback=replies.append)
        await asyncio.sleep(0.05)  # that batch is written and waits
        for n in range(1, 11):  # ten more ticks while it is out
            batcher.command("RPUSH", "nagle", n, callback=replies.append)
            await asyncio.sleep(0)
        assert batcher.pipelines == 1
        await batcher.flush()
    finally:
        sync.close()
        await batcher.close()
    assert replies == list(range(1, 12))
    assert batcher.pipelines == 2  # the ten ticks' commands and the PING: one write


@pytest.mark.integration
async def test_script_reloaded_after_script_flush(server: RedisServer) -> None:
    batcher = RedisBatcher(server.url)
    await batcher.start()
    text = "return tonumber(ARGV[1]) + 1"
    assert await batcher.call_script(text, (), ("1",)) == 2
    sync = server.client()
    sync.script_flush()
    sync.close()
    assert await batcher.call_script(text, (), ("41",)) == 42
    sync = server.client()
    sync.script_flush()
    sync.close()
    replies: list[Any] = []
    batcher.script(text, (), ("6",), callback=replies.append)
    await batcher.flush()  # its PING was answered before the script's EVAL re-send
    assert replies == [7]
    await batcher.close()


@pytest.mark.integration
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
