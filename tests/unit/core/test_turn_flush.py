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


class _Busy(_Client):
    """Written at this loop time already: its output waits for the turn's flush."""

    __slots__ = ()

    def flush_read(self, now: float) -> bool:
        return False


def test_every_client_a_read_marks_is_written_at_its_end() -> None:
    """The first two in slots, the others in the list: all written, none scheduled."""
    loop = _Loop()
    turn = TurnFlush(cast(asyncio.AbstractEventLoop, loop))
    log: list[str] = []
    for _ in range(2):
        assert turn.begin_read()
        for name in ("a", "b", "c", "d"):
            turn.mark(_Client(log, name))
        turn.end_read(1.0)
        assert sorted(log) == ["a", "b", "c", "d"]
        assert loop.soon == []
        log.clear()


def test_clients_written_at_this_time_already_wait_for_the_turn_s_flush() -> None:
    loop = _Loop()
    turn = TurnFlush(cast(asyncio.AbstractEventLoop, loop))
    log: list[str] = []
    assert turn.begin_read()
    turn.mark(_Busy(log, "first"))
    turn.mark(_Client(log, "second"))
    turn.mark(_Busy(log, "third"))
    turn.end_read(1.0)
    assert log == ["second"]
    assert len(loop.soon) == 1
    loop.turn()
    assert sorted(log) == ["first", "second", "third"]
    assert loop.soon == []


def test_a_flush_scheduled_during_a_read_writes_its_clients() -> None:
    """A node link's frames scheduled the turn's flush in the read: the clients the read marked
    (before it and after) are written by that flush, not at the read's end."""
    loop = _Loop()
    turn = TurnFlush(cast(asyncio.AbstractEventLoop, loop))
    log: list[str] = []
    assert turn.begin_read()
    turn.mark(_Client(log, "a"))
    turn.mark(_Client(log, "b"))
    turn.add(lambda: log.append("link"))
    turn.mark(_Client(log, "c"))
    turn.end_read(1.0)
    assert log == []
    assert len(loop.soon) == 1
    loop.turn()
    assert sorted(log) == ["a", "b", "c", "link"]
    assert loop.soon == []
