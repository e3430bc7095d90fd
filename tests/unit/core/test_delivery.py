"""Session delivery and broker routing with in-memory links."""

from __future__ import annotations

from tests.support.sink_link import connect_client
from xmq.codec.packets import (
    Connect,
    Puback,
    Publish,
    Subscribe,
    SubscriptionRequest,
)
from xmq.codec.properties import Properties
from xmq.core.broker import Broker
from xmq.core.memory_cost import MESSAGE_COST, WORDS_DELIVERY_COST
from xmq.core.message import Message
from xmq.core.session import QueueLimits
from xmq.core.settings import CoreSettings


def _broker(**queues: int) -> Broker:
    limits = dict(max_messages=100, max_session_bytes=10_000, budget_bytes=100_000, max_inflight=10)
    limits.update(queues)
    return Broker(CoreSettings(queues=QueueLimits(**limits)))


def _message(topic: str, payload: bytes = b"x", qos: int = 1) -> Message:
    return Message(topic, payload, qos, False, None, "publisher", 0.0)


async def test_window_then_queue_then_pump() -> None:
    broker = _broker(max_inflight=2)
    conn, link = await connect_client(broker, "c")
    conn.handle(Subscribe(1, [SubscriptionRequest("t", 1)]))
    link.packets()
    for n in range(4):
        broker.publish(_message("t", f"{n}".encode()))
    sent = [p for p in link.packets() if isinstance(p, Publish)]
    assert [p.payload for p in sent] == [b"0", b"1"]
    session = conn.session
    assert session is not None and len(session.queue) == 2
    conn.handle(Puback(sent[0].packet_id))
    more = [p for p in link.packets() if isinstance(p, Publish)]
    assert [p.payload for p in more] == [b"2"]


async def test_queue_bounds_count_bytes_and_budget() -> None:
    broker = _broker(max_inflight=1, max_messages=3)
    conn, link = await connect_client(broker, "c")
    conn.handle(Subscribe(1, [SubscriptionRequest("t", 1)]))
    delivered = [broker.publish(_message("t")) for _ in range(6)]
    assert delivered == [1, 1, 1, 1, 0, 0]  # one in flight, three queued, two dropped
    assert broker.stats.messages_dropped == 2
    # a queued message costs its queue entry, its Message and twice its size (memory_cost)
    cost = WORDS_DELIVERY_COST + MESSAGE_COST + 2 * 101
    budget = _broker(max_inflight=1, budget_bytes=2 * cost + 100, max_session_bytes=100_000)
    conn2, _ = await connect_client(budget, "d")
    conn2.handle(Subscribe(1, [SubscriptionRequest("t", 1)]))
    results = [budget.publish(_message("t", b"y" * 100)) for _ in range(5)]
    assert results == [1, 1, 1, 0, 0]  # 1 in flight + 2 queued within the budget
    assert budget.stats.queued_bytes == 2 * cost


async def test_overlapping_filters_merge_into_one_delivery() -> None:
    broker = _broker()
    conn, link = await connect_client(broker, "c")
    first = Properties()
    first.subscription_identifiers = [3]
    conn.handle(Subscribe(1, [SubscriptionRequest("a/+", 0)], first))
    second = Properties()
    second.subscription_identifiers = [4]
    conn.handle(Subscribe(2, [SubscriptionRequest("a/#", 2)], second))
    link.packets()
    broker.publish(_message("a/b", qos=2))
    [publish] = [p for p in link.packets() if isinstance(p, Publish)]
    assert publish.qos == 2
    assert publish.properties is not None
    assert sorted(publish.properties.subscription_identifiers or []) == [3, 4]


async def test_no_local_and_plan_invalidation() -> None:
    broker = _broker()
    conn, link = await connect_client(broker, "me")
    conn.handle(Subscribe(1, [SubscriptionRequest("t", 1, no_local=True)]))
    link.packets()
    assert broker.publish(Message("t", b"x", 1, False, None, "me", 0.0)) == 0
    other, other_link = await connect_client(broker, "other")
    other.handle(Subscribe(1, [SubscriptionRequest("t", 1)]))  # after the plan was cached
    assert broker.publish(_message("t")) == 2


async def test_shared_group_takes_unacknowledged_messages_elsewhere() -> None:
    broker = _broker()
    one, one_link = await connect_client(broker, "one")
    two, two_link = await connect_client(broker, "two")
    for conn in (one, two):
        conn.handle(Subscribe(1, [SubscriptionRequest("$share/g/t", 1)]))
    one_link.packets()
    two_link.packets()
    for n in range(4):
        broker.publish(_message("t", f"{n}".encode()))
    got_one = [p.payload for p in one_link.packets() if isinstance(p, Publish)]
    got_two = [p.payload for p in two_link.packets() if isinstance(p, Publish)]
    assert len(got_one) == 2 and len(got_two) == 2
    one.connection_lost()
    moved = [p.payload for p in two_link.packets() if isinstance(p, Publish)]
    assert sorted(moved) == sorted(got_one)


async def test_expired_messages_are_not_delivered_from_the_queue() -> None:
    broker = _broker()
    conn, link = await connect_client(broker, "c", Connect(client_id="c", properties=_expiry(60)))
    conn.handle(Subscribe(1, [SubscriptionRequest("t", 1)]))
    conn.connection_lost()
    props = Properties()
    props.message_expiry_interval = 5
    broker.publish(Message("t", b"old", 1, False, props, None, broker.now() - 10))
    broker.publish(_message("t", b"new"))
    again, again_link = await connect_client(
        broker, "c", Connect(client_id="c", clean_start=False, properties=_expiry(60)), drain=False
    )
    payloads = [p.payload for p in again_link.packets() if isinstance(p, Publish)]
    assert payloads == [b"new"]
    assert broker.stats.messages_expired == 1
    assert again.session is not None


def _expiry(seconds: int) -> Properties:
    props = Properties()
    props.session_expiry_interval = seconds
    return props


async def test_refusals_and_routing_time_are_counted() -> None:
    broker = _broker()
    conn, link = await connect_client(broker, "c")
    conn.handle(Subscribe(1, [SubscriptionRequest("a/#/b", 1), SubscriptionRequest("ok", 1)]))
    assert broker.stats.subscribe_refused_by_reason == {0x8F: 1}
    conn.handle(Publish("ok", b"x", qos=1, packet_id=7))
    assert broker.stats.route_seconds.count == 1
    assert broker.stats.received_by_qos == [0, 1, 0]
    assert broker.stats.sent_by_qos == [0, 1, 0]
    assert broker.stats.received_bytes_by_qos == [0, 1, 0]
    assert broker.stats.sent_bytes_by_qos == [0, 1, 0]
