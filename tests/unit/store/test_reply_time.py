"""A Redis read's time, read once: its replies' callbacks take it (``read_at``), not the clock."""

from __future__ import annotations

import asyncio
from typing import Any

from xmq.core.turn_flush import TurnFlush
from xmq.store.resp_connection import RespConnection


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def _connection(turn: TurnFlush | None) -> RespConnection:
    conn = RespConnection()
    conn.connection_made(_Transport())
    if turn is not None:
        conn.read_in_turns(turn)
    return conn


async def test_the_replies_of_a_read_get_its_time_and_none_outside_it() -> None:
    loop = asyncio.get_running_loop()
    conn = _connection(TurnFlush(loop))
    seen: list[tuple[Any, float]] = []
    for _ in range(2):
        conn.send_one(b"*1\r\n$4\r\nPING\r\n", lambda reply: seen.append((reply, conn.read_at)))
    assert conn.read_at == 0.0
    before = loop.time()
    conn.data_received(b"+PONG\r\n:1\r\n")  # two replies, one read
    after = loop.time()
    assert [reply for reply, _ in seen] == [b"PONG", 1]
    assert seen[0][1] == seen[1][1]  # one clock read for the read's replies
    assert before <= seen[0][1] <= after
    assert conn.read_at == 0.0  # the read is over


async def test_without_a_turn_the_replies_get_no_time() -> None:
    conn = _connection(None)
    seen: list[float] = []
    conn.send_one(b"*1\r\n$4\r\nPING\r\n", lambda reply: seen.append(conn.read_at))
    conn.data_received(b"+PONG\r\n")
    assert seen == [0.0]  # (the caller reads its clock)
