"""``Broker.durable_sessions``: the exact count of the node's sessions with a durable store
(``node_caps.set_store``). The node link makes no durable context for a received message
while it is 0, and a publisher's QoS 1 PUBACK is not held for local records: a count one too
low would give a persistent session's record a fresh id (a duplicate after a replay) or
acknowledge a message before its record is written. Checked against the sessions
themselves after every step: connect, takeover (resumed, clean, turned non-persistent), a
clean session beside them, disconnect, expiry, hand-over, a lost lease."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.sink_link import connect_client
from tests.support.virtual_broker import on_virtual_loop, run_until
from xmq.codec.packets import Connect, Subscribe, SubscriptionRequest
from xmq.codec.properties import Properties
from xmq.core.broker import Broker
from xmq.core.deadline_wheel import RESOLUTION_S
from xmq.core.settings import CoreSettings


class _Store:
    """A durable store that writes nothing (the count only reads whether one is set)."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None  # record, subscribed, disconnected, ...


def _broker() -> Broker:
    broker = Broker(CoreSettings())
    broker.store = _Store()
    return broker


def _connect(client_id: str, expiry: int, clean_start: bool = True) -> Connect:
    props = Properties()
    props.session_expiry_interval = expiry
    return Connect(client_id=client_id, clean_start=clean_start, properties=props)


def _count(broker: Broker) -> int:
    """The count, checked against the sessions held (every session with a store is one)."""
    stored = sum(1 for session in broker.sessions.values() if session.store is not None)
    assert broker.durable_sessions == stored
    return stored


async def test_the_count_follows_connect_takeover_and_disconnect() -> None:
    broker = _broker()
    first, _ = await connect_client(broker, "p", _connect("p", 60))
    assert _count(broker) == 1
    await connect_client(broker, "clean", Connect(client_id="clean"))  # no expiry: no store
    assert _count(broker) == 1
    resumed, _ = await connect_client(broker, "p", _connect("p", 60, clean_start=False))
    assert resumed.session is not None and resumed.session is first.session  # taken over
    assert _count(broker) == 1
    fresh, _ = await connect_client(broker, "p", _connect("p", 60))  # clean start: a new one
    assert fresh.session is not resumed.session and _count(broker) == 1
    # taken over by a connection without an expiry: the same session, its store taken
    plain, _ = await connect_client(broker, "p", _connect("p", 0, clean_start=False))
    assert plain.session is fresh.session and _count(broker) == 0
    plain.connection_lost()  # expiry 0: it ends (its store was taken already)
    assert "p" not in broker.sessions and _count(broker) == 0
    again, _ = await connect_client(broker, "p", _connect("p", 60))
    assert _count(broker) == 1
    again.connection_lost()  # parked: its records are still written
    assert "p" in broker.sessions and _count(broker) == 1


async def test_the_count_follows_expiry_hand_over_and_a_lost_lease() -> None:
    broker = _broker()
    loop = on_virtual_loop(broker, asyncio.get_running_loop().time())
    for n in range(3):
        conn, _ = await connect_client(broker, f"p{n}", _connect(f"p{n}", 10 + 100 * n))
        conn.handle(Subscribe(1, [SubscriptionRequest("t", 1)]))
        if n < 2:
            conn.connection_lost()
    await connect_client(broker, "clean", Connect(client_id="clean"))
    assert _count(broker) == 3
    run_until(loop, loop.now + 10 + 2 * RESOLUTION_S)  # p0 expires
    assert "p0" not in broker.sessions and _count(broker) == 2
    assert broker.hand_over("p1") is not None  # moved to another node (parked here)
    assert _count(broker) == 1
    broker.hand_over("p2")  # connected: its client is closed, the session moves
    assert "p2" not in broker.sessions and _count(broker) == 0
    await connect_client(broker, "p3", _connect("p3", 60))
    assert _count(broker) == 1
    broker.drop_all_sessions()  # the lease is lost: every session goes
    assert broker.sessions == {} and _count(broker) == 0


async def test_no_store_no_count() -> None:
    """A node without a durable store (one node, or ``persistence`` off) counts none."""
    broker = Broker(CoreSettings())
    conn, _ = await connect_client(broker, "p", _connect("p", 60))
    assert broker.persistent_sessions == 1 and _count(broker) == 0
    conn.connection_lost()
    assert _count(broker) == 0
