"""The queued-message cost constants against the real objects, measured with tracemalloc."""

from __future__ import annotations

import gc
import sys
import tracemalloc

import pytest

from xmq.codec.packets import MQTT_5, Publish
from xmq.codec.plain_publish import PlainRead, read_plain
from xmq.codec.writer import encode
from xmq.core import delivery_queue
from xmq.core.broker import Broker
from xmq.core.delivery_queue import Delivery
from xmq.core.memory_cost import (
    DELIVERY_COST,
    MESSAGE_COST,
    RECORD_COST,
    RETAINED_COST,
    WORDS_DELIVERY_COST,
)
from xmq.core.message import Message
from xmq.core.session import QueueLimits, Session, Subscription
from xmq.core.settings import CoreSettings
from xmq.core.stats import BrokerStats

_COUNT = 2000


def _offline_sessions(count: int, stats: BrokerStats) -> list[Session]:
    limits = QueueLimits(1_000_000, 1 << 40, 1 << 40, 10)
    sessions = []
    for n in range(count):
        session = Session(f"s{n}", limits, stats, expiry_s=60)
        session.queue_for_append()  # the deque itself is the session's cost, not the queue's
        sessions.append(session)
    return sessions


def _routed(n: int) -> Message:
    """A one-byte QoS 1 message as the plain-PUBLISH path builds it (with its wire bytes)."""
    data = encode(Publish(topic=f"bcast/{n:06d}", payload=b"x", qos=1, packet_id=1), MQTT_5)
    plain = PlainRead()
    assert read_plain(data, MQTT_5, 1 << 20, plain)
    topic, qos, payload, head, tail = plain.topic, plain.qos, plain.payload, plain.head, plain.tail
    return Message(topic, payload, qos, False, None, "publisher", 0.0, (head, tail), MQTT_5)


def _measure(build: object) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()  # type: ignore[operator]
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del kept
    return int(after - before)


@pytest.mark.parametrize("held_elsewhere", [True, False])
def test_one_message_per_delivery_stays_within_its_charge(
    held_elsewhere: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``held_elsewhere``: something else keeps each ``Message`` (in flight to another
    session, retained): it stays an object. Else a queue's table keeps it as plain data
    (``core.delivery_queue``, here from the first), smaller; the charge is the same upper
    bound."""
    monkeypatch.setattr(delivery_queue, "_PLAIN_FROM", 0)
    stats = BrokerStats()
    [session] = _offline_sessions(1, stats)
    elsewhere: list[Message] = []

    def build() -> object:
        for n in range(_COUNT):
            message = _routed(n)
            session.deliver(message, 1, False)
            if held_elsewhere:
                elsewhere.append(message)
        return session

    used = _measure(build)
    assert len(session.queue) == _COUNT
    per_message = used / _COUNT
    assert stats.queued_bytes == session.queued_bytes + _COUNT * (MESSAGE_COST + _routed(0).size)
    charged = stats.queued_bytes / _COUNT
    assert charged >= per_message, (charged, per_message)
    if held_elsewhere:
        assert charged <= 1.6 * per_message, (charged, per_message)  # not a wild over-count
    else:  # plain bytes (220-260 here): the charge, made when queued, stays the object's
        assert charged <= 4 * per_message, (charged, per_message)


def test_fan_out_charges_each_delivery_and_the_message_once() -> None:
    stats = BrokerStats()
    first, *sessions = _offline_sessions(_COUNT + 1, stats)
    message = _routed(0)
    first.deliver(message, 1, False)  # queued already: the rest is what each delivery adds

    def build() -> object:
        for session in sessions:
            session.deliver(message, 1, False)
        return sessions

    used = _measure(build)
    assert all(len(session.queue) == 1 for session in sessions)
    # a queue's only entry takes the array's smallest allocation, 32 bytes: 8 of them are the
    # session's (its queue's fixed part); beyond that only the message's count of queued
    # words changed (a few hundred bytes, once)
    assert used <= _COUNT * (WORDS_DELIVERY_COST + 8) + 512, used
    deliveries = _COUNT + 1
    assert stats.queued_bytes == deliveries * WORDS_DELIVERY_COST + MESSAGE_COST + 2 * message.size
    assert 1.5 * used / _COUNT >= WORDS_DELIVERY_COST


@pytest.mark.parametrize("length", [3, 5, 9, 40, 700, _COUNT])
def test_queues_partly_sent_stay_within_their_charge(length: int) -> None:
    """``length`` messages to each of several sessions, then almost a quarter of each queue
    sent: the words not yet dropped from the front still fit in the charge of the live
    deliveries, but for a fixed part per queue (its session's cost)."""
    stats = BrokerStats()
    first, *sessions = _offline_sessions(1 + max(4, 4 * _COUNT // length), stats)
    messages = [_routed(n) for n in range(length)]
    for message in messages:  # queued already (their share of the table is MESSAGE_COST's)
        first.deliver(message, 1, False)
    sent = max(0, length // 4 - 1)

    def build() -> object:
        for message in messages:
            for session in sessions:
                session.deliver(message, 1, False)
        for session in sessions:
            for _ in range(sent):
                session.unqueued(session.queue.popleft())
        return sessions

    used = _measure(build)
    live = sum(len(session.queue) for session in sessions)
    assert live == len(sessions) * (length - sent)
    fixed = 8 + 128  # the smallest allocation's rest, fewer than 8 sent entries' words
    assert used <= live * WORDS_DELIVERY_COST + len(sessions) * fixed + 512, used / live
    assert 2 * used / live >= WORDS_DELIVERY_COST


def test_a_delivery_held_as_itself_stays_within_its_charge() -> None:
    """A shared-group delivery is queued as a ``Delivery`` object, at ``DELIVERY_COST``."""
    stats = BrokerStats()
    [session] = _offline_sessions(1, stats)
    share = Subscription(session, "t/#", 1, share_group="g")
    messages = [_routed(n) for n in range(_COUNT)]

    def build() -> object:
        for message in messages:
            session.deliver(message, 1, False, (), share)
        return session

    used = _measure(build)
    assert len(session.queue) == _COUNT
    assert session.queued_bytes == sum(DELIVERY_COST + m.size for m in messages)
    assert used / _COUNT <= DELIVERY_COST
    assert 1.5 * used / _COUNT >= DELIVERY_COST


def test_releasing_every_queued_delivery_returns_the_budget_to_zero() -> None:
    stats = BrokerStats()
    sessions = _offline_sessions(3, stats)
    shared = _routed(1)
    for session in sessions:
        session.deliver(shared, 1, False)
        session.deliver(_routed(2), 1, False)
    assert stats.queued_bytes > 0
    sessions[0].clear_queue()
    sessions[1].discard_queue()
    # what is left: session 2's two deliveries and the two messages they hold
    left = 2 * WORDS_DELIVERY_COST + 2 * MESSAGE_COST + 2 * (shared.size + _routed(2).size)
    assert stats.queued_bytes == left
    sessions[2].clear_queue()
    assert stats.queued_bytes == 0
    assert all(session.queued_bytes == 0 for session in sessions)


def test_retained_messages_stay_within_their_charge() -> None:
    broker = Broker(CoreSettings())
    messages = [
        Message(f"site/{n % 10}/dev/{n:06d}", b"x", 1, True, None, "p", 0.0) for n in range(_COUNT)
    ]

    def build() -> object:
        for message in messages:
            broker.publish(message)
        return broker

    used = _measure(build)  # the messages existed before: what retaining them added
    assert len(broker.retained) == _COUNT
    per_message = used / _COUNT + sys.getsizeof(messages[0]) + 33 + 49
    charged = broker.retained.bytes / _COUNT
    assert charged >= per_message, (charged, per_message)
    assert charged <= 2 * per_message, (charged, per_message)
    assert broker.retained.bytes == sum(RETAINED_COST + m.size for m in messages)
    for message in messages:
        broker.publish(Message(message.topic, b"", 0, True, None, "p", 0.0))
    assert broker.retained.bytes == 0 and len(broker.retained) == 0


def _recorded(message: Message, record: bytes) -> Delivery:
    delivery = Delivery(message, 1, False, (), None)
    delivery.record = record
    return delivery


def test_recorded_deliveries_stay_within_their_charge() -> None:
    """A persistent session's delivery in a cluster is queued with its durable record: each
    record its own (a local publisher's: a record id each) is charged, not only the
    delivery (the budget once counted 152 bytes for ~470 used)."""
    stats = BrokerStats()
    [session] = _offline_sessions(1, stats)

    def build() -> object:
        for n in range(_COUNT):
            record = b"r" * 60 + n.to_bytes(4, "big")  # (a real one's size: see the store)
            assert session.deliver_recorded(_recorded(_routed(n), record), 0.0)
        return session

    used = _measure(build)
    assert len(session.queue) == _COUNT
    each = WORDS_DELIVERY_COST + RECORD_COST + 64
    assert session.queued_bytes == _COUNT * (each + _routed(0).size)
    assert stats.queued_bytes == _COUNT * (each + MESSAGE_COST + 2 * _routed(0).size)
    charged = stats.queued_bytes / _COUNT
    per_delivery = used / _COUNT
    assert charged >= per_delivery, (charged, per_delivery)
    assert charged <= 3 * per_delivery, (charged, per_delivery)  # (messages: plain bytes)


def test_a_recorded_fan_out_shares_one_record() -> None:
    """One forwarded message to many persistent sessions here: one record object shared by
    every queue (``RedisSessionStore.new_record``), a few words per delivery; each delivery
    is still charged a record (an upper bound)."""
    stats = BrokerStats()
    first, *sessions = _offline_sessions(_COUNT + 1, stats)
    message = _routed(0)
    record = b"r" * 64
    first.deliver_recorded(_recorded(message, record), 0.0)

    def build() -> object:
        for session in sessions:
            assert session.deliver_recorded(_recorded(message, record), 0.0)
        return sessions

    used = _measure(build)
    assert all(len(session.queue) == 1 for session in sessions)
    # words (the array's smallest allocation) and a list of records of one slot per queue
    assert used <= _COUNT * (WORDS_DELIVERY_COST + 8 + RECORD_COST + 64) + 512, used / _COUNT
    charged = stats.queued_bytes - MESSAGE_COST - 2 * message.size
    assert charged == (_COUNT + 1) * (WORDS_DELIVERY_COST + RECORD_COST + len(record))
    for session in [first, *sessions]:
        delivery = session.queue.popleft()
        assert delivery.record is record
        session.unqueued(delivery)
    assert stats.queued_bytes == 0
