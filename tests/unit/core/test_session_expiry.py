"""Session expiry on the broker's expiry wheel (one timer for every parked session), on a
virtual clock: a parked session ends at its Session Expiry Interval, never before, at most
two of the wheel's slots after; a resumed one is not ended."""

from __future__ import annotations

import asyncio

from tests.support.sink_link import connect_client
from tests.support.virtual_broker import on_virtual_loop, run_until
from tests.support.virtual_loop import VirtualLoop
from xmq.codec.packets import Connect
from xmq.codec.properties import Properties
from xmq.core.broker import Broker
from xmq.core.deadline_wheel import RESOLUTION_S
from xmq.core.settings import CoreSettings


def _expiry(seconds: int) -> Properties:
    props = Properties()
    props.session_expiry_interval = seconds
    return props


async def _parked(broker: Broker, count: int, expiry: int, prefix: str = "c") -> None:
    for n in range(count):
        client_id = f"{prefix}{n}"
        conn, _link = await connect_client(
            broker, client_id, Connect(client_id=client_id, properties=_expiry(expiry))
        )
        conn.connection_lost()


def _virtual(broker: Broker) -> VirtualLoop:
    """The broker's timers and clock on a virtual loop (connections still run on the real
    one: their login is a task)."""
    return on_virtual_loop(broker, asyncio.get_running_loop().time())


async def test_parked_sessions_expire_at_their_interval_on_one_timer() -> None:
    broker = Broker(CoreSettings())
    loop = _virtual(broker)
    await _parked(broker, 1, 3600, "kept")
    await _parked(broker, 100, 10)
    parked_at = loop.now
    assert len(broker.sessions) == 101 and broker.persistent_sessions == 101
    # one wheel and one timer for all of them, not a TimerHandle per session
    assert broker.expiries.count == 101 and loop.pending() == 1
    run_until(loop, parked_at + 10 - 0.01)
    assert len(broker.sessions) == 101  # never before its interval
    run_until(loop, parked_at + 10 + 2 * RESOLUTION_S)
    assert list(broker.sessions) == ["kept0"]  # the 3600 s one is still parked
    assert broker.persistent_sessions == 1 and broker.expiries.count == 1


async def test_a_resumed_session_leaves_the_wheel_and_is_not_ended() -> None:
    broker = Broker(CoreSettings())
    loop = _virtual(broker)
    await _parked(broker, 2, 10)
    run_until(loop, loop.now + 5)
    again, _link = await connect_client(
        broker, "c0", Connect(client_id="c0", clean_start=False, properties=_expiry(10))
    )
    assert again.session is broker.sessions["c0"] and again.session.wheel_slot == 0
    assert broker.expiries.count == 1  # c1 only
    run_until(loop, loop.now + 10)
    assert list(broker.sessions) == ["c0"]  # c1 expired, c0 is connected
    # parked again: its interval counts from this disconnect, not the first one
    again.connection_lost()
    parked_at = loop.now
    run_until(loop, parked_at + 9.9)
    assert "c0" in broker.sessions
    run_until(loop, parked_at + 10 + 2 * RESOLUTION_S)
    assert broker.sessions == {} and broker.expiries.count == 0 and loop.pending() == 0


async def test_a_session_that_never_expires_is_not_filed() -> None:
    broker = Broker(CoreSettings())
    await _parked(broker, 1, 0xFFFF_FFFF)
    assert broker.sessions["c0"].wheel_slot == 0 and broker.expiries.count == 0
