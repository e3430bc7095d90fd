"""A batcher given the process's per-turn flush (``RedisBatcher(..., turn=...)``): its flush runs
at the end of the read that queued its commands, not in a ``call_soon`` of its own, and a read of
its Redis connection is a read of that flush too: what the replies' callbacks write to clients
(a delivery, a held PUBACK) and the batcher's next flush go at that read's end."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, cast

import pytest

from tests.support.redis_server import RedisServer, running_redis
from tests.support.sink_link import SinkLink
from xmq.core.turn_flush import TurnFlush
from xmq.store.redis_batcher import RedisBatcher

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with running_redis() as running:
        yield running


class _Loop:
    """A loop whose ``call_soon`` only records (nothing of this flush runs a turn later)."""

    def __init__(self) -> None:
        self.soon: list[Any] = []

    def call_soon(self, callback: Any) -> None:
        self.soon.append(callback)


class _Client(SinkLink):
    __slots__ = ("log",)

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def flush(self) -> None:
        self.log.append("client written")


async def test_a_flush_armed_in_a_read_runs_at_its_end_and_a_reply_s_output_at_the_reply_s(
    server: RedisServer,
) -> None:
    loop = _Loop()
    turn = TurnFlush(cast(asyncio.AbstractEventLoop, loop))
    batcher = RedisBatcher(server.url, turn=turn)
    await batcher.start()
    log: list[str] = []
    client = _Client(log)
    answered: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def replied(reply: Any) -> None:
        log.append(f"reply {reply!r}")
        turn.mark(client)  # a delivery written by the reply's callback
        answered.set_result(None)

    try:
        assert turn.begin_read()  # a client's read queues a command
        batcher.command("PING", callback=replied)
        assert batcher.pipelines == 0  # not sent before the read's end
        turn.end_read(0.0)
        assert batcher.pipelines == 1  # sent there, no callback scheduled for it
        async with asyncio.timeout(5):
            await answered
        # the reply's read ended after its callback: the client was written there
        assert log == ["reply b'PONG'", "client written"]
        assert loop.soon == []
    finally:
        await batcher.close()
