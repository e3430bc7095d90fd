"""The process's one per-turn flush: the clients' output and the node links' frames are written
by one scheduled callback a loop turn, not one for the clients and another per link; what a
read callback (a client's, a node link's) makes is written at its end."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

from tests.support.sink_link import SinkLink
from tests.unit.cluster.test_held_forwarding import Transport, _hub, _linked, _message
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.peer_link import PeerLink
from xmq.codec.packets import Connect
from xmq.contract.message_record import encode_record
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.connection import ClientConnection
from xmq.core.session import Subscription
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


def _hub_with_a_link(loop: _Loop) -> tuple[ClusterHub, PeerLink, Transport]:
    """A hub whose broker flushes through ``loop``, linked to node-2 (what linking wrote
    taken)."""
    hub, _ = _hub()
    hub.broker.turn_flush = TurnFlush(cast(asyncio.AbstractEventLoop, loop))
    link = _linked(hub, "node-2", 5)
    transport = Transport()
    link.transport = transport  # type: ignore[assignment]
    loop.turn()
    transport.written.clear()
    return hub, link, transport


def test_a_link_and_a_client_writing_in_one_turn_schedule_one_callback() -> None:
    loop = _Loop()
    hub, link, transport = _hub_with_a_link(loop)
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


def _read_marking_three_and_a_link(turn: TurnFlush, log: list[str]) -> None:
    """A read marking clients ``a`` and ``b`` (the slots), a node link, and ``c`` (the list)."""
    assert turn.begin_read()
    turn.mark(_Client(log, "a"))
    turn.mark(_Client(log, "b"))
    turn.add(lambda: log.append("link"))
    turn.mark(_Client(log, "c"))
    turn.end_read(1.0)


def test_a_flush_scheduled_before_a_read_writes_what_the_read_marks() -> None:
    """The turn's flush is scheduled already (a client marked outside a read): the clients a
    read then marks and the link frames it makes are written by that flush, not at its end."""
    loop = _Loop()
    turn = TurnFlush(cast(asyncio.AbstractEventLoop, loop))
    log: list[str] = []
    turn.mark(_Client(log, "before"))
    assert len(loop.soon) == 1
    _read_marking_three_and_a_link(turn, log)
    assert log == []
    assert len(loop.soon) == 1
    loop.turn()
    assert sorted(log) == ["a", "b", "before", "c", "link"]
    assert loop.soon == []


def test_a_reads_clients_and_link_frames_are_written_at_its_end() -> None:
    """Clients in the slots and in the list, and a node link's frames: all at the read's end."""
    loop = _Loop()
    turn = TurnFlush(cast(asyncio.AbstractEventLoop, loop))
    log: list[str] = []
    _read_marking_three_and_a_link(turn, log)
    assert sorted(log) == ["a", "b", "c", "link"]
    assert log[-1] == "link"  # the clients first
    assert loop.soon == []


def test_a_links_frames_made_in_a_read_are_written_at_its_end() -> None:
    """A local publisher's message forwarded within its read goes out at the read's end, with
    its PUBACK, not by a callback scheduled for the turn; a later read's frames at the same
    loop time (millisecond) wait for the turn's flush, coalesced with the rest of the turn's."""
    loop = _Loop()
    hub, link, transport = _hub_with_a_link(loop)
    turn = hub.broker.turn_flush
    log: list[str] = []
    assert turn.begin_read()
    link.send_publish(b"frame-1", _message(b"1"), False)
    turn.mark(_Client(log, "publisher"))  # its PUBACK
    assert transport.written == []
    turn.end_read(1.0)
    assert (log, transport.written, loop.soon) == (["publisher"], [b"frame-1"], [])
    assert turn.begin_read()  # another read in the same millisecond
    link.send_publish(b"frame-2", _message(b"2"), False)
    link.send_publish(b"frame-3", _message(b"3"), False)
    turn.end_read(1.0002)
    assert transport.written == [b"frame-1"]  # waits for the turn's flush
    assert len(loop.soon) == 1
    loop.turn()
    assert transport.written == [b"frame-1", b"frame-2", b"frame-3"]
    assert turn.begin_read()  # a read at a later millisecond: written at its end again
    link.send_publish(b"frame-4", _message(b"4"), False)
    turn.end_read(1.002)
    assert (transport.written[-1], loop.soon) == (b"frame-4", [])


class _MarkingClient(SinkLink):
    """A client link that, as the socket adapter does, marks the turn's flush on its first write
    since its last flush, and counts its flushes."""

    __slots__ = ("flushes", "marked", "turn")

    def __init__(self, turn: TurnFlush) -> None:
        super().__init__()
        self.turn = turn
        self.marked = False
        self.flushes = 0

    def write_publish(self, head: bytes, packet_id: int, tail: bytes) -> None:
        super().write_publish(head, packet_id, tail)
        if not self.marked:
            self.marked = True
            self.turn.mark(self)

    def flush(self) -> None:
        self.marked = False
        self.flushes += 1


async def test_a_link_read_writes_its_local_deliveries_at_its_end() -> None:
    """A PUBLISH frame from another node delivered to a local subscriber: the subscriber is
    written at the end of the link's read, as at the end of a client's read (no callback)."""
    loop = _Loop()
    hub, _ = _hub()
    broker = hub.broker
    turn = broker.turn_flush = TurnFlush(cast(asyncio.AbstractEventLoop, loop))
    client = _MarkingClient(turn)
    conn = ClientConnection(broker, client, AnonymousAuthenticator(), AllowAll())
    conn.handle(Connect(client_id="sub"))
    for _ in range(5):
        await asyncio.sleep(0)
    client.packets()  # (the CONNACK)
    session = broker.sessions["sub"]
    broker.subscribe(session, Subscription(session, "t", 1))
    link = _linked(hub, "node-2", 5)
    link.transport = Transport()  # type: ignore[assignment]
    loop.turn()  # (what linking it wrote)
    record = encode_record("node-2/5/f1", "t", b"hello", 1, False, None, "pub", 1, False)
    link.data_received(frames.publish(record, False))
    assert bytes(client.out).endswith(b"hello")  # delivered
    assert client.flushes == 1  # and written at the read's end
    assert loop.soon == []  # with no callback scheduled for it
