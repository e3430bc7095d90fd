"""A broker whose timers and clock run on a ``VirtualLoop``, and one with parked sessions."""

from __future__ import annotations

import asyncio
from typing import cast

from tests.support.virtual_loop import VirtualLoop
from xmq.core.broker import Broker
from xmq.core.session import QueueLimits, Session, Subscription
from xmq.core.settings import CoreSettings


def on_virtual_loop(broker: Broker, start: float = 1000.0) -> VirtualLoop:
    """The broker's timers and clock on a new virtual loop starting at ``start``."""
    loop = VirtualLoop(start)
    broker._loop = cast(asyncio.AbstractEventLoop, loop)
    return loop


def run_until(loop: VirtualLoop, until: float, step: float = 0.05) -> None:
    """Advance the virtual clock ``step`` at a time, a loop turn each, up to ``until``."""
    while loop.now < until:
        loop.advance(step)
        loop.run_turn()


def parked_sessions(
    count: int, topic_filter: str, qos: int, queues: QueueLimits
) -> tuple[Broker, VirtualLoop]:
    """A broker on a virtual loop with ``count`` offline persistent sessions ``s0``, ``s1``,
    ... each subscribed to ``topic_filter`` at ``qos``."""
    broker = Broker(CoreSettings(queues=queues))
    loop = on_virtual_loop(broker)
    for n in range(count):
        session = Session(f"s{n}", broker.settings.queues, broker.stats, expiry_s=600)
        broker.sessions[session.client_id] = session
        broker.subscribe(session, Subscription(session, topic_filter, qos))
    return broker, loop
