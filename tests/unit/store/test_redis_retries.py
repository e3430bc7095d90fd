"""Transient Redis failures are retried in order; final ones reach the caller as failures.

A scripted RESP server stands in for Redis where a real one cannot be made to answer
``-LOADING`` / ``-READONLY`` on cue; ``WAIT`` is tried on a real Redis and a real replica.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hiredis import Reader

from tests.support.redis_server import running_redis
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.redis_endpoint import RedisEndpoint
from xmq.store.redis_errors import RedisWriteFailed, error_kind, is_transient
from xmq.store.resp_connection import RedisConnectionLost, RedisReplyError

_SERVERS: list[ScriptedRedis] = []
Script = Callable[[list[bytes], "ScriptedRedis"], bytes | None]


class ScriptedRedis:
    """Parses commands with hiredis and answers what ``script`` returns (None: hang up)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.seen: list[list[bytes]] = []
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        _SERVERS.append(self)
        port = self.server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}/0"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        parser = Reader()
        try:
            while data := await reader.read(65536):
                parser.feed(data)
                command = parser.gets()
                while command is not False:
                    self.seen.append(command)
                    answer = self.script(command, self)
                    if answer is None:
                        writer.close()
                        return
                    writer.write(answer)
                    command = parser.gets()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    def names(self) -> list[bytes]:
        return [command[0] for command in self.seen]


@pytest.fixture
async def batchers() -> AsyncIterator[list[RedisBatcher]]:
    made: list[RedisBatcher] = []
    yield made
    for batcher in made:
        await batcher.close()
    for server in _SERVERS:
        await server.close()
    _SERVERS.clear()
    await asyncio.sleep(0.01)  # let the closed transports go


async def _batcher(made: list[RedisBatcher], url: str, **options: Any) -> RedisBatcher:
    batcher = RedisBatcher(url, **options)
    await batcher.start()
    made.append(batcher)
    return batcher


def hangs_up_once(answer: bytes) -> Script:
    """A server whose first connection dies with the first command unanswered, then answers
    ``answer`` to everything."""

    def script(command: list[bytes], server: ScriptedRedis) -> bytes | None:
        return None if server.connections == 1 else answer

    return script


def _reply_future() -> tuple[asyncio.Future[Any], Callable[[Any], None]]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def done(value: Any) -> None:
        if not future.done():
            future.set_result(value)

    return future, done


@pytest.mark.integration
async def test_loading_replies_are_retried_in_order(batchers: list[RedisBatcher]) -> None:
    loading = {"left": 3}  # the first pipeline

    def script(command: list[bytes], server: ScriptedRedis) -> bytes:
        if loading["left"]:
            loading["left"] -= 1
            return b"-LOADING Redis is loading the dataset in memory\r\n"
        if command[0] == b"PING":
            return b"+PONG\r\n"
        return b":%d\r\n" % int(command[2])

    server = ScriptedRedis(script)
    batcher = await _batcher(batchers, await server.start())
    replies: list[Any] = []
    for n in range(3):
        batcher.command("RPUSH", "k", n, callback=replies.append)
    # until the three failed and wait for their backoff (~20 ms): checked every loop turn, not
    # every millisecond (a 1 ms sleep on a loaded host can oversleep the whole backoff)
    give_up = asyncio.get_running_loop().time() + 10
    for _ in range(10_000_000):
        if batcher.retrying == 3 or asyncio.get_running_loop().time() > give_up:
            break
        await asyncio.sleep(0)
    assert batcher.retrying == 3
    batcher.command("RPUSH", "k", 3, callback=replies.append)  # queued during the backoff
    await asyncio.wait_for(batcher.flush(), 10)
    assert replies == [0, 1, 2, 3]  # each got its own reply, in order, none an error
    assert batcher.stats.retries["loading"] == 3
    pushes = [int(c[2]) for c in server.seen if c[0] == b"RPUSH"]
    assert pushes == [0, 1, 2, 0, 1, 2, 3]  # the retried ones before what came later


@pytest.mark.integration
async def test_a_final_error_is_a_failure_not_a_retry(batchers: list[RedisBatcher]) -> None:
    server = ScriptedRedis(lambda command, _: b"-WRONGTYPE Operation against a key\r\n")
    batcher = await _batcher(batchers, await server.start())
    future, done = _reply_future()
    batcher.command("RPUSH", "k", "v", callback=done)
    reply = await asyncio.wait_for(future, 5)
    assert isinstance(reply, RedisWriteFailed)
    assert server.names() == [b"RPUSH"]
    assert batcher.stats.given_up == 1


@pytest.mark.integration
async def test_a_write_still_failing_after_the_window_is_given_up(
    batchers: list[RedisBatcher],
) -> None:
    server = ScriptedRedis(lambda command, _: b"-BUSY Redis is busy running a script\r\n")
    batcher = await _batcher(batchers, await server.start(), retry_for_s=0.3)
    future, done = _reply_future()
    started = asyncio.get_running_loop().time()
    batcher.command("SADD", "k", 1, callback=done)
    reply = await asyncio.wait_for(future, 10)
    assert isinstance(reply, RedisWriteFailed)
    assert asyncio.get_running_loop().time() - started >= 0.3
    assert server.names().count(b"SADD") >= 3  # retried meanwhile, with backoff


@pytest.mark.integration
async def test_a_look_up_fails_at_once(batchers: list[RedisBatcher]) -> None:
    server = ScriptedRedis(lambda command, _: b"-LOADING Redis is loading\r\n")
    batcher = await _batcher(batchers, await server.start())
    future, done = _reply_future()
    batcher.command("GET", "k", callback=done, retry=False)
    reply = await asyncio.wait_for(future, 5)
    assert isinstance(reply, RedisReplyError) and error_kind(reply) == "loading"
    assert server.names() == [b"GET"]


@pytest.mark.integration
async def test_a_push_cut_by_a_lost_connection_is_sent_again_only_if_absent(
    batchers: list[RedisBatcher],
) -> None:
    server = ScriptedRedis(hangs_up_once(b":1\r\n"))  # the RPUSH unanswered, then 1
    batcher = await _batcher(batchers, await server.start())
    future, done = _reply_future()
    batcher.script(
        "-- push", ("q",), (b"record", "0"), callback=done, args_if_lost=(b"record", "1")
    )
    assert await asyncio.wait_for(future, 10) == 1
    assert server.seen[0][0] == b"EVALSHA" and server.seen[0][-1] == b"0"
    resent = server.seen[-1]  # the same call, now asking for push-if-absent
    assert resent[:4] == server.seen[0][:4] and resent[-2:] == [b"record", b"1"]
    assert batcher.stats.retries["connection_lost"] == 1


@pytest.mark.integration
async def test_readonly_drops_the_connection_for_the_new_master(
    batchers: list[RedisBatcher],
) -> None:
    def script(command: list[bytes], server: ScriptedRedis) -> bytes:
        if server.connections == 1:
            return b"-READONLY You can't write against a read only replica.\r\n"
        return b":1\r\n"

    server = ScriptedRedis(script)
    batcher = await _batcher(batchers, await server.start())
    future, done = _reply_future()
    batcher.command("HSET", "h", "f", "v", callback=done)
    assert await asyncio.wait_for(future, 10) == 1
    assert server.connections == 2


@pytest.mark.integration
async def test_wait_replicas_holds_replies_until_a_replica_has_the_writes(
    batchers: list[RedisBatcher],
) -> None:
    with running_redis() as master:
        batcher = await _batcher(batchers, master.url, wait_replicas=1, wait_timeout_ms=100)
        future, done = _reply_future()
        batcher.command("RPUSH", "q", b"r1", callback=done)
        await asyncio.sleep(0.5)
        assert not future.done()  # no replica: not acknowledged
        assert batcher.stats.errors["wait_short"] >= 1
        replica_of = ("--replicaof", master.host, str(master.port))
        with running_redis(extra_args=replica_of) as replica:
            assert await asyncio.wait_for(future, 20) == 1
            client = replica.client()
            try:
                assert client.lrange("q", 0, -1) == [b"r1"]
            finally:
                client.close()


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        ("redis://:pw@h:7/2", RedisEndpoint("h", 7, None, "pw", 2)),
        ("redis://u:p%40w@h", RedisEndpoint("h", 6379, "u", "p@w", 0)),
        (
            "redis+sentinel://:pw@a:1,b,[::1]:3/mymaster/4",
            RedisEndpoint(
                password="pw",
                db=4,
                sentinels=(("a", 1), ("b", 26379), ("::1", 3)),
                master_name="mymaster",
            ),
        ),
    ],
)
def test_endpoint_urls(url: str, endpoint: RedisEndpoint) -> None:
    assert RedisEndpoint.parse(url) == endpoint


@pytest.mark.parametrize("url", ["rediss://h", "redis+sentinel://a:1", "redis+sentinel:///m"])
def test_bad_endpoint_urls(url: str) -> None:
    with pytest.raises(ValueError, match=r"\S"):
        RedisEndpoint.parse(url)


def test_transient_kinds() -> None:
    assert is_transient(RedisReplyError("LOADING x"))
    assert is_transient(RedisReplyError("MASTERDOWN x"))
    assert is_transient(RedisConnectionLost("gone"))
    assert not is_transient(RedisReplyError("WRONGTYPE x"))
    assert not is_transient(RedisReplyError("OOM command not allowed"))
    assert error_kind(TimeoutError()) == "timeout"
    assert error_kind(ConnectionRefusedError()) == "connection_refused"
