"""The keep-alive wheel: one timer for every connection's keep alive."""

from __future__ import annotations

import asyncio
from typing import cast

from tests.support.virtual_broker import on_virtual_loop
from tests.support.virtual_loop import VirtualLoop
from xmq.codec.packets import Connect, Pingreq
from xmq.codec.reason_codes import ReasonCode
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.client_link import ClientLink
from xmq.core.connection import ClientConnection
from xmq.core.connection_states import CLOSED, CONNECTED
from xmq.core.deadline_wheel import DeadlineWheel
from xmq.core.lease_fence import LeaseFence
from xmq.core.settings import CoreSettings


class _Client:
    def __init__(self, next_deadline: float | None = None) -> None:
        self.wheel_slot = 0
        self.due_at: list[float] = []
        self.next_deadline = next_deadline

    def wheel_due(self, now: float) -> float | None:
        self.due_at.append(now)
        deadline, self.next_deadline = self.next_deadline, None
        return deadline


class _Link(ClientLink):
    peer = "127.0.0.1:1"

    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False
        self.congested = False

    def write(self, data: bytes) -> None:
        self.out += data

    def write_publish(self, head: bytes, packet_id: int, tail: bytes) -> None:
        self.out += head + tail

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def login_accepted(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _wheel(resolution: float) -> tuple[DeadlineWheel, VirtualLoop]:
    """A wheel on a virtual clock (time moves only in ``_run``)."""
    loop = VirtualLoop()
    return DeadlineWheel(lambda: cast(asyncio.AbstractEventLoop, loop), resolution), loop


def _run(loop: VirtualLoop, seconds: float, step: float = 0.005) -> None:
    """Move the clock ``seconds`` ahead in ``step``s, a loop turn after each."""
    end = loop.now + seconds
    while loop.now < end:
        loop.advance(min(step, end - loop.now))
        loop.run_turn()


def test_a_client_is_checked_at_its_deadline_never_before() -> None:
    wheel, loop = _wheel(0.02)
    client = _Client()
    deadline = loop.time() + 0.1
    wheel.add(client, deadline)
    assert wheel.count == 1 and client.wheel_slot
    _run(loop, 0.06)
    assert client.due_at == []
    _run(loop, 0.09)
    [checked] = client.due_at
    assert checked >= deadline
    assert wheel.count == 0 and client.wheel_slot == 0


def test_a_removed_client_is_not_checked_and_the_timer_stops() -> None:
    wheel, loop = _wheel(0.02)
    kept, removed = _Client(), _Client()
    wheel.add(kept, loop.time() + 0.03)
    wheel.add(removed, loop.time() + 0.03)
    wheel.remove(removed)
    assert removed.wheel_slot == 0 and wheel.count == 1
    _run(loop, 0.12)
    assert removed.due_at == [] and len(kept.due_at) == 1
    assert wheel._handle is None  # nothing filed: no timer


def test_a_client_that_returns_a_deadline_is_filed_again() -> None:
    wheel, loop = _wheel(0.02)
    client = _Client(next_deadline=loop.time() + 0.08)
    wheel.add(client, loop.time() + 0.02)
    _run(loop, 0.06)
    assert len(client.due_at) == 1 and wheel.count == 1
    _run(loop, 0.12)
    assert len(client.due_at) == 2 and wheel.count == 0


def test_a_deadline_already_past_is_checked_at_the_next_tick() -> None:
    wheel, loop = _wheel(0.02)
    client = _Client()
    wheel.add(client, loop.time() - 5.0)
    _run(loop, 0.03)
    assert len(client.due_at) == 1


async def _connected(broker: Broker, keep_alive: int) -> tuple[ClientConnection, _Link]:
    link = _Link()
    conn = ClientConnection(broker, link, AnonymousAuthenticator(), AllowAll())
    conn.handle(Connect(client_id=f"c{id(link)}", protocol_version=5, keep_alive=keep_alive))
    await asyncio.sleep(0)
    assert conn.state == CONNECTED
    link.out.clear()
    return conn, link


async def test_a_silent_connection_is_closed_with_0x8d_an_active_one_is_not() -> None:
    broker = Broker(CoreSettings())
    loop = on_virtual_loop(broker)
    broker.deadlines = DeadlineWheel(lambda: broker.loop, 0.05)
    silent, silent_link = await _connected(broker, 1)
    active, active_link = await _connected(broker, 1)
    idle_since = broker.now()
    closed_after: float | None = None
    for step in range(1, 401):  # 2 s in 5 ms steps: the active client pings every 0.25 s
        _run(loop, 0.005)
        if step % 50 == 0:
            active.touch(broker.now())
            active.handle(Pingreq())
        if closed_after is None and silent.state == CLOSED:
            closed_after = broker.now() - idle_since
    assert silent.state == CLOSED and silent_link.closed and closed_after is not None
    # 1.5 x keep alive, never before, at most two of the wheel's slots after
    assert 1.5 <= closed_after <= 1.5 + 2 * 0.05 + 0.005
    assert silent_link.out[0] == 0xE0 and silent_link.out[2] == ReasonCode.KEEP_ALIVE_TIMEOUT
    assert broker.stats.disconnects_by_reason == {ReasonCode.KEEP_ALIVE_TIMEOUT: 1}
    assert active.state == CONNECTED and not active_link.closed
    assert broker.deadlines.count == 1  # the active one, filed again
    active.connection_lost()
    assert broker.deadlines.count == 0 and active.wheel_slot == 0


async def test_keep_alive_zero_files_nothing() -> None:
    broker = Broker(CoreSettings())
    conn, _link = await _connected(broker, 0)
    assert conn.wheel_slot == 0 and broker.deadlines.count == 0


class _Failing(_Client):
    def wheel_due(self, now: float) -> float | None:
        super().wheel_due(now)
        raise RuntimeError("boom")


def test_a_failing_entry_does_not_stop_the_wheel() -> None:
    wheel, loop = _wheel(0.02)
    failing, later = _Failing(), _Client()
    wheel.add(failing, loop.time() + 0.02)
    wheel.add(later, loop.time() + 0.1)
    _run(loop, 0.2)
    assert len(failing.due_at) == 1 and len(later.due_at) == 1 and wheel.count == 0


def _fenced_wheel(resolution: float) -> tuple[DeadlineWheel, VirtualLoop, LeaseFence, list[int]]:
    """A wheel on a virtual clock behind a lease fence proven for 1 s from now (0.9 s with
    the margin); ``doubts`` counts the fence's calls for a renewal."""
    loop = VirtualLoop()
    fence = LeaseFence()
    doubts: list[int] = []
    fence.watch(lambda: doubts.append(1))
    fence.proven(loop.now, 1.0)
    wheel = DeadlineWheel(lambda: cast(asyncio.AbstractEventLoop, loop), resolution, fence=fence)
    return wheel, loop, fence, doubts


def test_a_tick_past_the_lease_fence_is_held_until_the_lease_is_proven() -> None:
    """After a pause the node must not act for its sessions (close a silent client, publish
    a will) before it has proven its lease: the wheel's tick is held like a read."""
    wheel, loop, fence, doubts = _fenced_wheel(0.02)
    client = _Client()
    wheel.add(client, loop.time() + 2.0)
    _run(loop, 2.5)  # the node paused, or Redis unreachable: no renewal for 2.5 s
    assert client.due_at == []
    assert fence.waiting == 1 and doubts == [1]  # held once, a renewal asked for at once
    assert loop.pending() == 0  # no timer piles up while held
    fence.proven(loop.now, 1.0)  # the renewal succeeded: the held tick runs now
    [checked] = client.due_at
    assert checked == loop.now
    assert wheel.count == 0 and wheel._handle is None


def test_a_tick_held_when_the_lease_was_lost_finds_the_closed_clients_gone() -> None:
    wheel, loop, fence, _ = _fenced_wheel(0.02)
    closed, kept = _Client(), _Client()
    wheel.add(closed, loop.time() + 2.0)
    wheel.add(kept, loop.time() + 5.0)
    _run(loop, 2.5)
    fence.expire()  # the lease is gone: the node goes offline and closes its clients
    wheel.remove(closed)
    fence.lift()  # offline, nothing to fence: the held tick runs
    assert closed.due_at == [] and kept.due_at == []
    assert wheel.count == 1 and loop.pending() == 1  # the timer runs again for the rest
    _run(loop, 2.6)
    assert len(kept.due_at) == 1
