"""Retained messages after a SUBSCRIBE go out a slice per loop turn (virtual loop)."""

from __future__ import annotations

import asyncio
from typing import cast

from tests.support.sink_link import SinkLink, connect_client
from tests.support.virtual_loop import VirtualLoop
from xmq.codec.packets import Puback, Publish, Suback, Subscribe, SubscriptionRequest, Unsubscribe
from xmq.core.broker import Broker
from xmq.core.connection import ClientConnection
from xmq.core.message import Message
from xmq.core.retained_feed import SLICE
from xmq.core.session import QueueLimits
from xmq.core.settings import CoreSettings


def _broker(**queues: int) -> Broker:
    limits = dict(
        max_messages=100_000, max_session_bytes=1 << 30, budget_bytes=1 << 30, max_inflight=100
    )
    limits.update(queues)
    return Broker(CoreSettings(queues=QueueLimits(**limits)))


def _retain(broker: Broker, count: int, qos: int = 0) -> None:
    for n in range(count):
        broker.publish(Message(f"t/{n:05d}", b"old", qos, True, None, "publisher", 0.0))


async def _subscriber(broker: Broker) -> tuple[ClientConnection, SinkLink, VirtualLoop]:
    conn, link = await connect_client(broker, "sub")
    loop = VirtualLoop()
    broker._loop = cast(asyncio.AbstractEventLoop, loop)  # the feed's turns, one by one
    return conn, link, loop


def _publishes(link: SinkLink) -> list[Publish]:
    return [p for p in link.packets() if isinstance(p, Publish)]


async def test_a_large_match_goes_out_a_slice_per_turn_in_order_and_once() -> None:
    broker = _broker()
    _retain(broker, 1000)
    conn, link, loop = await _subscriber(broker)
    conn.handle(Subscribe(1, [SubscriptionRequest("#", 0)]))
    packets = link.packets()
    assert isinstance(packets[0], Suback)
    received = [p.topic for p in packets[1:] if isinstance(p, Publish)]
    assert len(received) == SLICE  # the first slice at once, after the SUBACK
    while loop.pending():
        loop.run_turn()
        turn = _publishes(link)
        assert len(turn) <= SLICE
        received += [p.topic for p in turn]
    assert received == [f"t/{n:05d}" for n in range(1000)]  # all, once, in the index's order
    assert loop.turns == -(-1000 // SLICE) - 1


async def test_a_message_retained_during_the_feed_is_not_sent_twice_nor_the_stale_one() -> None:
    broker = _broker()
    _retain(broker, 1000)
    conn, link, loop = await _subscriber(broker)
    conn.handle(Subscribe(1, [SubscriptionRequest("#", 0)]))
    link.packets()
    # t/00999 is still owed: a new retained message replaces it, and t/00998 is cleared
    broker.publish(Message("t/00999", b"new", 0, True, None, "publisher", 0.0))
    broker.publish(Message("t/00998", b"", 0, True, None, "publisher", 0.0))
    live = _publishes(link)
    assert [(p.topic, p.payload) for p in live] == [("t/00999", b"new"), ("t/00998", b"")]
    rest: list[Publish] = []
    while loop.pending():
        loop.run_turn()
        rest += _publishes(link)
    topics = [p.topic for p in rest]
    assert "t/00999" not in topics and "t/00998" not in topics
    assert len(rest) == 1000 - SLICE - 2
    assert len(set(topics)) == len(topics)


async def test_unsubscribing_stops_the_feed() -> None:
    broker = _broker()
    _retain(broker, 1000)
    conn, link, loop = await _subscriber(broker)
    conn.handle(Subscribe(1, [SubscriptionRequest("t/#", 0)]))
    link.packets()
    conn.handle(Unsubscribe(2, ["t/#"]))
    link.packets()
    loop.run_turn()
    assert _publishes(link) == []
    assert loop.pending() == 0


async def test_a_full_queue_makes_the_feed_wait_not_drop() -> None:
    broker = _broker(max_messages=50, max_inflight=10)
    _retain(broker, 300, qos=1)
    conn, link, loop = await _subscriber(broker)
    conn.handle(Subscribe(1, [SubscriptionRequest("t/#", 1)]))
    sent = _publishes(link)
    session = conn.session
    assert session is not None
    assert len(sent) == 10 and len(session.queue) == 50  # window + queue, then it waits
    loop.run_turn()
    assert _publishes(link) == [] and len(session.queue) == 50
    received = [p.topic for p in sent]
    for _ in range(200):
        if not (loop.pending() or session.inflight or session.queue):
            break
        for publish in sent:
            conn.handle(Puback(publish.packet_id))  # each ack pumps the queue
        sent = _publishes(link)
        loop.advance(0.01)
        loop.run_turn()
        sent += _publishes(link)
        received += [p.topic for p in sent]
    assert broker.stats.messages_dropped == 0
    assert sorted(set(received)) == [f"t/{n:05d}" for n in range(300)]


async def test_a_filter_listed_a_thousand_times_subscribes_once_and_feeds_once() -> None:
    broker = _broker()
    _retain(broker, 100)
    conn, link, loop = await _subscriber(broker)
    conn.handle(Subscribe(1, [SubscriptionRequest("#", 0)] * 999 + [SubscriptionRequest("#", 1)]))
    packets = link.packets()
    suback = packets[0]
    assert isinstance(suback, Suback)
    assert suback.reason_codes == [0] * 999 + [1]  # each occurrence answered
    session = conn.session
    assert session is not None and list(session.subscriptions) == ["#"]
    assert session.subscriptions["#"].qos == 1  # the last occurrence wins
    publishes = [p for p in packets if isinstance(p, Publish)]
    assert len(publishes) == 100
    assert loop.pending() == 0


async def test_a_second_filter_waiting_its_turn_skips_messages_retained_meanwhile() -> None:
    broker = _broker()
    _retain(broker, 600)
    conn, link, loop = await _subscriber(broker)
    conn.handle(Subscribe(1, [SubscriptionRequest("t/#", 0), SubscriptionRequest("t/+", 0)]))
    link.packets()  # the first slice of the first walk
    broker.publish(Message("t/00001", b"new", 0, True, None, "publisher", 0.0))
    live = _publishes(link)
    assert [(p.topic, p.payload) for p in live] == [("t/00001", b"new")]
    rest: list[Publish] = []
    while loop.pending():
        loop.run_turn()
        rest += _publishes(link)
    # both filters owe t/00000..t/00599 (the first already sent t/00001's old copy); the
    # second must not send t/00001 again: its new copy went live after the SUBSCRIBE
    second = [p for p in rest[600 - SLICE :] if p.topic == "t/00001"]
    assert second == []
    assert len(rest) == 2 * 600 - SLICE - 1
