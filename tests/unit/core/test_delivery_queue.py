"""Queued deliveries out of the cyclic collector's sight (``core.delivery_queue``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from xmq.codec.packets import MQTT_5, Publish
from xmq.codec.plain_publish import PlainRead, read_plain
from xmq.codec.properties import Properties
from xmq.codec.writer import encode
from xmq.core import delivery_queue
from xmq.core.delivery_queue import _PLAIN_FROM, Delivery, DeliveryQueue, messages_held_as_words
from xmq.core.memory_cost import MESSAGE_COST, WORDS_DELIVERY_COST
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


def _wired(n: int) -> Message:
    """A routed message with the publisher's wire bytes, as the plain-PUBLISH path makes."""
    publish = Publish(topic=f"p2p/{n}", payload=b"%d" % n, qos=1, packet_id=1)
    plain = PlainRead()
    assert read_plain(encode(publish, MQTT_5), MQTT_5, 1 << 20, plain)
    topic, qos, payload, head, tail = plain.topic, plain.qos, plain.payload, plain.head, plain.tail
    return Message(topic, payload, qos, False, None, "pub", 0.0, (head, tail), MQTT_5)


def test_messages_only_queued_are_no_tracked_objects() -> None:
    """One distinct message per queued delivery (each to one session in turn): a message
    nothing but the queues hold is plain data, not a tracked ``Message`` (10,000 before),
    beyond the first ``_PLAIN_FROM`` of them."""
    stats = BrokerStats()
    sessions = _offline(_SESSIONS, stats)
    for session in sessions:
        session.queue_for_append()
    before, _ = _tracked()
    for n in range(_SESSIONS * _MESSAGES):
        assert sessions[n % _SESSIONS].deliver(_wired(n), 1, False)
    after, _ = _tracked()
    messages = sum(1 for o in gc.get_objects() if type(o) is Message)
    assert messages <= _PLAIN_FROM + 1, messages  # (+ the last: looked at with the next)
    assert after - before < _PLAIN_FROM + 1_000, after - before
    for session in sessions:
        session.discard_queue()
    assert stats.queued_bytes == 0


@pytest.fixture
def _plain_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages kept as plain bytes from the first (not after ``_PLAIN_FROM`` of them)."""
    monkeypatch.setattr(delivery_queue, "_PLAIN_FROM", 0)


@pytest.mark.usefixtures("_plain_at_once")
def test_a_message_kept_as_plain_data_comes_back_the_same() -> None:
    stats = BrokerStats()
    first, second = _offline(2, stats)
    original = _wired(7)
    wire = original.encode(MQTT_5, 1, False)
    expiring = Message("e/ü/1", b"x", 1, True, None, None, 100.0, forward_id="n/1/f3")
    expiring.expires_at = 160
    for message in (original, expiring):
        first.deliver(message, 1, False)
        second.deliver(message, 1, False)
    del message
    fields = ("topic", "payload", "qos", "retain", "origin", "forward_id", "size", "expires_at")
    kept = [tuple(getattr(m, f) for f in fields) for m in (original, expiring)]
    del original, expiring
    first.deliver(_wired(8), 1, False)  # the earlier ones are looked at: nothing else holds them
    alive = [o.topic for o in gc.get_objects() if type(o) is Message]
    assert alive == ["p2p/8"], alive  # (looked at with the next one queued)
    got = [first.queue.popleft(), second.queue.popleft()]
    assert got[0].message is got[1].message  # one object again for every session naming it
    assert tuple(getattr(got[0].message, f) for f in fields) == kept[0]
    assert got[0].message.encode(MQTT_5, 1, False) == wire  # its wire bytes were kept
    for session, delivery in zip((first, second), got, strict=True):
        session.unqueued(delivery)
    later = [first.queue.popleft(), second.queue.popleft()]
    assert tuple(getattr(later[0].message, f) for f in fields) == kept[1]
    for session, delivery in zip((first, second), later, strict=True):
        session.unqueued(delivery)
    # what is left: the 8, queued once (the plain ones were released exactly)
    assert stats.queued_bytes == WORDS_DELIVERY_COST + MESSAGE_COST + 2 * _wired(8).size
    first.discard_queue()
    second.discard_queue()
    assert stats.queued_bytes == 0


@pytest.mark.usefixtures("_plain_at_once")
def test_a_message_held_elsewhere_or_with_properties_stays_an_object() -> None:
    stats = BrokerStats()
    [session] = _offline(1, stats)
    retained = _wired(1)
    props = Properties()
    props.content_type = "text/plain"
    with_props = Message("p/1", b"x", 1, False, props, "pub", 0.0)
    session.deliver(retained, 1, False)
    session.deliver(with_props, 1, False)
    del with_props
    session.deliver(_wired(2), 1, False)
    session.deliver(_wired(3), 1, False)
    objects = [o for o in gc.get_objects() if type(o) is Message]
    assert retained in objects
    assert any(o.topic == "p/1" for o in objects)
    delivery = session.queue.popleft()
    assert delivery.message is retained
    session.unqueued(delivery)
    session.discard_queue()
    assert stats.queued_bytes == 0
