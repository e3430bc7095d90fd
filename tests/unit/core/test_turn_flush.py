"""The process's one per-turn flush: the clients' output and the node links' frames are written
by one scheduled callback a loop turn, not one for the clients and another per link."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

from tests.support.sink_link import SinkLink
from tests.unit.cluster.test_held_forwarding import Transport, _hub, _linked, _message
from xmq.core.turn_flush import TurnFlush


class _Loop:
    """Records ``call_soon``: the callbacks of the next turn, run by ``turn``."""

    def __init__(self) -> None:
        self.soon: list[Callable[[], object]] = []

    def call_soon(self, callback: Callable[[], object]) -> None:
        self.soon.append(callback)

    def turn(self) -> None:
        soon, self.soon = self.soon, []
        for callback in soon:
            callback()


class _Client(SinkLink):
    __slots__ = ("flushed", "log")

    def __init__(self, log: list[str], name: str) -> None:
        super().__init__()
        self.log = log
        self.flushed = name

    def flush(self) -> None:
        self.log.append(self.flushed)


def test_clients_and_links_of_a_turn_are_flushed_by_one_callback() -> None:
    loop = _Loop()
    turn = TurnFlush(cast(asyncio.AbstractEventLoop, loop))
    log: list[str] = []
    turn.mark(_Client(log, "a"))
    turn.add(lambda: log.append("link"))
    turn.mark(_Client(log, "b"))
    assert len(loop.soon) == 1
    loop.turn()
    assert log == ["a", "b", "link"]
    assert loop.soon == []


def test_a_mark_while_flushing_is_flushed_next_turn() -> None:
    loop = _Loop()
    turn = TurnFlush(cast(asyncio.AbstractEventLoop, loop))
    log: list[str] = []
    late = _Client(log, "late")

    def link_flush() -> None:
        log.append("link")
        turn.mark(late)  # (say, a write its flush caused)

    turn.add(link_flush)
    loop.turn()
    assert log == ["link"]
    assert len(loop.soon) == 1
    loop.turn()
    assert log == ["link", "late"]


def test_a_link_and_a_client_writing_in_one_turn_schedule_one_callback() -> None:
    loop = _Loop()
    hub, _ = _hub()
    hub.broker.turn_flush = TurnFlush(cast(asyncio.AbstractEventLoop, loop))
    link = _linked(hub, "node-2", 5)
    transport = Transport()
    link.transport = transport  # type: ignore[assignment]
    loop.turn()  # (what linking it wrote)
    transport.written.clear()
    log: list[str] = []
    link.send_publish(b"frame-1", _message(b"1"), False)
    hub.broker.turn_flush.mark(_Client(log, "publisher"))  # its PUBACK, this turn
    link.send_publish(b"frame-2", _message(b"2"), False)
    assert len(loop.soon) == 1
    assert transport.written == []  # coalesced: nothing written before the turn's end
    loop.turn()
    assert log == ["publisher"]
    assert transport.written == [b"frame-1", b"frame-2"]  # one writelines for the turn
