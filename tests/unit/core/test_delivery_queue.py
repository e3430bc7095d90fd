"""Queued deliveries out of the cyclic collector's sight (``core.delivery_queue``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from xmq.core.delivery_queue import Delivery, DeliveryQueue, messages_held_as_words
from xmq.core.message import Message
from xmq.core.session import QueueLimits, Session, Subscription
from xmq.core.stats import BrokerStats

_SESSIONS = 200
_MESSAGES = 50


@pytest.fixture(autouse=True)
def _earlier_queues_released() -> Iterator[None]:
    """Queues of earlier tests' sessions (garbage in cycles) release their messages when the
    collector frees them: collect first, so a test's ``messages_held_as_words`` baseline does
    not drop under it when ``_tracked`` collects."""
    gc.collect()
    yield


def _offline(count: int, stats: BrokerStats) -> list[Session]:
    limits = QueueLimits(1_000_000, 1 << 40, 1 << 40, 10)
    return [Session(f"s{n}", limits, stats, expiry_s=60) for n in range(count)]


def _message(n: int, qos: int = 1) -> Message:
    return Message(f"bcast/{n}", b"x", qos, False, None, "p", 0.0)


def _tracked() -> tuple[int, int]:
    """Objects the collector tracks: all of them, and the ``Delivery`` ones."""
    gc.collect()
    objects = gc.get_objects()
    return len(objects), sum(1 for o in objects if type(o) is Delivery)


def test_queued_fan_out_adds_no_tracked_object_per_delivery() -> None:
    stats = BrokerStats()
    sessions = _offline(_SESSIONS, stats)
    held = messages_held_as_words()
    messages = [_message(n) for n in range(_MESSAGES)]
    for session in sessions:
        session.queue_for_append()
    before, deliveries_before = _tracked()
    for message in messages:
        for session in sessions:
            assert session.deliver(message, 1, False)
    after, deliveries_after = _tracked()
    assert sum(len(s.queue) for s in sessions) == _SESSIONS * _MESSAGES  # 10,000 deliveries
    assert deliveries_after == deliveries_before  # a Delivery each: 10,000 tracked objects
    assert after - before < 1_000, after - before  # (whatever else the process did meanwhile)
    for session in sessions:
        session.discard_queue()
    assert stats.queued_bytes == 0
    assert messages_held_as_words() == held


def test_deliveries_leave_in_order_as_they_came() -> None:
    stats = BrokerStats()
    [session] = _offline(1, stats)
    held = messages_held_as_words()
    share = Subscription(session, "t/#", 1, share_group="g")
    recorded = Delivery(_message(3), 1, False, (), None)
    recorded.record = b"record"
    session.deliver(_message(0, qos=2), 2, True, (7,))
    session.deliver(_message(1), 1, False, (), share)  # held as itself
    session.deliver(_message(2), 1, False, (5, 9))  # two identifiers: held as itself
    session.queue_restored(recorded)
    session.deliver(_message(4), 1, False, (268_435_455,))
    queue = session.queue
    assert len(queue) == 5
    assert list(queue.held()) == [queue[1], queue[2]]  # the recorded one: words and its record
    seen = [(d.message.topic, d.qos, d.retain, d.subscription_ids) for d in queue]
    assert seen == [
        ("bcast/0", 2, True, (7,)),
        ("bcast/1", 1, False, ()),
        ("bcast/2", 1, False, (5, 9)),
        ("bcast/3", 1, False, ()),
        ("bcast/4", 1, False, (268_435_455,)),
    ]
    first = queue.popleft()
    assert (first.packet_id, first.released, first.share, first.record) == (0, False, None, None)
    assert queue.popleft().share is share
    left = [queue.popleft() for _ in range(3)]
    assert [(d.message.topic, d.record) for d in left] == [
        ("bcast/2", None),
        ("bcast/3", b"record"),
        ("bcast/4", None),
    ]
    assert not queue and len(queue) == 0
    assert messages_held_as_words() == held


def test_a_long_queue_drops_its_sent_words() -> None:
    queue = DeliveryQueue()
    held = messages_held_as_words()
    message = _message(0)
    for _ in range(10_000):
        queue.append(Delivery(message, 1, False, (), None))
    for _ in range(9_000):
        assert queue.popleft().message is message
    assert len(queue) == 1_000
    assert queue._head < 2 * 4 * 1_000  # noqa: SLF001 - what the array still keeps
    queue.clear()
    assert messages_held_as_words() == held


def test_a_forgotten_queue_lets_its_messages_go() -> None:
    stats = BrokerStats()
    sessions = _offline(3, stats)
    held = messages_held_as_words()
    message = _message(0)
    for session in sessions:
        session.deliver(message, 1, False)
    assert messages_held_as_words() == held + 1
    del session, sessions  # never cleared: sessions dropped with their queues
    assert messages_held_as_words() == held
