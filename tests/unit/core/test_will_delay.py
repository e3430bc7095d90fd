"""Delayed wills on the broker's expiry wheel (one timer for every parked session and its
will), on a virtual clock, with the MQTT 5 semantics (3.1.2.5, 3.1.3.2.2): the will goes at
min(Will Delay Interval, Session Expiry Interval), never before, at most two of the wheel's
slots after; a client that resumes the session first cancels it; a session that ends first
(taken over with a clean start) sends it then."""

from __future__ import annotations

import asyncio

from tests.support.sink_link import SinkLink, connect_client
from tests.support.virtual_broker import on_virtual_loop, run_until
from tests.support.virtual_loop import VirtualLoop
from xmq.codec.packets import Connect, Publish, Subscribe, SubscriptionRequest, Will
from xmq.codec.properties import Properties
from xmq.core.broker import Broker
from xmq.core.deadline_wheel import RESOLUTION_S
from xmq.core.settings import CoreSettings
from xmq.protocol.connect_terms import SESSION_NEVER_EXPIRES

LATE = 2 * RESOLUTION_S
"""How late the wheel may act on a deadline."""


def _connect(client_id: str, expiry: int, will_delay: int, clean: bool = True) -> Connect:
    props = Properties()
    props.session_expiry_interval = expiry
    will_props = Properties()
    will_props.will_delay_interval = will_delay
    will = Will(f"will/{client_id}", client_id.encode(), 0, False, will_props)
    return Connect(client_id=client_id, clean_start=clean, properties=props, will=will)


async def _parked(broker: Broker, client_id: str, expiry: int, will_delay: int) -> None:
    conn, _link = await connect_client(broker, client_id, _connect(client_id, expiry, will_delay))
    conn.connection_lost()  # network loss: the will is due


async def _watcher(broker: Broker) -> SinkLink:
    conn, link = await connect_client(broker, "watcher")
    conn.handle(Subscribe(1, [SubscriptionRequest("will/#", 0)]))
    link.packets()
    return link


def _wills(link: SinkLink) -> list[bytes]:
    return [bytes(p.payload) for p in link.packets() if isinstance(p, Publish)]


def _virtual(broker: Broker) -> VirtualLoop:
    """The broker's timers and clock on a virtual loop (connections still run on the real
    one: their login is a task)."""
    return on_virtual_loop(broker, asyncio.get_running_loop().time())


async def test_delayed_wills_go_at_their_delay_on_one_timer_then_the_sessions_expire() -> None:
    broker = Broker(CoreSettings())
    loop = _virtual(broker)
    watcher = await _watcher(broker)
    for n in range(100):
        await _parked(broker, f"d{n}", 60, 5)
    parked_at = loop.now
    # no TimerHandle per will: the wheel's one timer (the watcher's keep alive is on another)
    assert broker.expiries.count == 100 and loop.pending() == 1
    run_until(loop, parked_at + 5 - 0.01)
    assert _wills(watcher) == []  # never before the delay
    run_until(loop, parked_at + 5 + LATE)
    assert sorted(_wills(watcher)) == sorted(b"d%d" % n for n in range(100))
    # still parked, filed again at their expiry (60 s from the disconnect, not from the will)
    assert len(broker.sessions) == 101 and broker.expiries.count == 100
    run_until(loop, parked_at + 60 - 0.01)
    assert len(broker.sessions) == 101
    run_until(loop, parked_at + 60 + LATE)
    assert list(broker.sessions) == ["watcher"] and broker.expiries.count == 0
    assert _wills(watcher) == []  # each will went once


async def test_a_will_delay_longer_than_the_expiry_goes_when_the_session_ends() -> None:
    broker = Broker(CoreSettings())
    loop = _virtual(broker)
    watcher = await _watcher(broker)
    await _parked(broker, "long", 3, 600)
    parked_at = loop.now
    run_until(loop, parked_at + 3 - 0.01)
    assert _wills(watcher) == [] and "long" in broker.sessions
    run_until(loop, parked_at + 3 + LATE)
    assert _wills(watcher) == [b"long"] and "long" not in broker.sessions
    assert broker.expiries.count == 0


async def test_a_resumed_session_cancels_its_delayed_will() -> None:
    broker = Broker(CoreSettings())
    loop = _virtual(broker)
    watcher = await _watcher(broker)
    await _parked(broker, "r", 60, 5)
    run_until(loop, loop.now + 3)
    again, _link = await connect_client(broker, "r", _connect("r", 60, 5, clean=False))
    session = broker.sessions["r"]
    assert again.session is session and session.wheel_slot == 0 and session.will is not None
    run_until(loop, loop.now + 10)
    assert _wills(watcher) == []  # cancelled, and the new connection's will is not due
    again.connection_lost()  # parked again: its new will is delayed from this disconnect
    parked_at = loop.now
    run_until(loop, parked_at + 5 - 0.01)
    assert _wills(watcher) == []
    run_until(loop, parked_at + 5 + LATE)
    assert _wills(watcher) == [b"r"]


async def test_a_session_ended_by_a_clean_start_sends_its_pending_will_at_once() -> None:
    broker = Broker(CoreSettings())
    loop = _virtual(broker)
    watcher = await _watcher(broker)
    await _parked(broker, "t", 60, 30)
    run_until(loop, loop.now + 1)
    props = Properties()
    props.session_expiry_interval = 60
    await connect_client(broker, "t", Connect(client_id="t", clean_start=True, properties=props))
    assert _wills(watcher) == [b"t"]  # the old session ended: its will went then
    assert broker.sessions["t"].wheel_slot == 0 and broker.expiries.count == 0
    run_until(loop, loop.now + 40)
    assert _wills(watcher) == []  # not a second time


async def test_a_session_that_never_expires_sends_its_will_and_leaves_the_wheel() -> None:
    broker = Broker(CoreSettings())
    loop = _virtual(broker)
    watcher = await _watcher(broker)
    await _parked(broker, "n", SESSION_NEVER_EXPIRES, 2)
    assert broker.expiries.count == 1
    run_until(loop, loop.now + 2 + LATE)
    assert _wills(watcher) == [b"n"]
    assert "n" in broker.sessions and broker.expiries.count == 0


async def test_a_session_handed_over_to_a_clean_start_elsewhere_sends_its_pending_will() -> None:
    """Another node takes the session over (TAKEOVER): resumed there, the pending delayed
    will is cancelled; started clean there, the session ends here and its will goes now."""
    broker = Broker(CoreSettings())
    loop = _virtual(broker)
    watcher = await _watcher(broker)
    await _parked(broker, "resumed", 60, 30)
    await _parked(broker, "restarted", 60, 30)
    broker.hand_over("resumed")
    broker.hand_over("restarted", ends_session=True)
    assert _wills(watcher) == [b"restarted"]
    assert list(broker.sessions) == ["watcher"] and broker.expiries.count == 0
    run_until(loop, loop.now + 60 + LATE)
    assert _wills(watcher) == []  # the resumed one's never goes


async def test_a_node_back_from_a_pause_sends_no_delayed_will_before_it_proves_its_lease() -> None:
    """Paused past its lease (SIGSTOP, a stalled VM), a node may have lost its sessions to
    another node, where a client resuming one cancels its will: the will's timer is held
    until a renewal proves the lease, and a node that lost it sends no will at all."""
    broker = Broker(CoreSettings())
    loop = _virtual(broker)
    watcher = await _watcher(broker)
    await _parked(broker, "kept", 600, 5)
    await _parked(broker, "moved", 600, 5)
    broker.fence.proven(loop.now, 10.0)
    doubts: list[int] = []
    broker.fence.watch(lambda: doubts.append(1))
    loop.advance(30)  # paused: nothing ran for 30 s
    run_until(loop, loop.now + 1)
    assert _wills(watcher) == [] and doubts == [1]  # held, a renewal asked for
    broker.fence.proven(loop.now, 10.0)  # the lease was still this node's
    assert sorted(_wills(watcher)) == [b"kept", b"moved"]

    await _parked(broker, "kept2", 600, 5)
    await _parked(broker, "moved2", 600, 5)
    loop.advance(30)
    run_until(loop, loop.now + 1)
    assert _wills(watcher) == []
    broker.fence.expire()  # the renewal found the lease gone: offline, sessions dropped
    broker.hand_over("kept2")  # as ``drop_all_sessions`` does (the watcher stays to see)
    broker.hand_over("moved2")
    broker.fence.lift()
    run_until(loop, loop.now + 10)
    assert _wills(watcher) == []  # their new owners decide
