"""A session's in-flight window (``core.inflight_window``): the dict's semantics in list slots."""

from __future__ import annotations

import sys

import pytest

from tests.support.sink_link import connect_client
from xmq.codec.packets import Connect, Disconnect, Puback, Publish, Subscribe, SubscriptionRequest
from xmq.codec.properties import Properties
from xmq.core.broker import Broker
from xmq.core.delivery_queue import Delivery
from xmq.core.inflight_window import InflightWindow
from xmq.core.message import Message
from xmq.core.session import QueueLimits
from xmq.core.settings import CoreSettings
from xmq.protocol.outbound_qos import QUEUED, SEND_NOW
from xmq.protocol.packet_ids import PacketIdAllocator, PacketIdExhausted


def _delivery(name: str = "t", qos: int = 1) -> Delivery:
    return Delivery(Message(name, b"x", qos, False, None, "p", 0.0), qos, False, (), None)


def _send(window: InflightWindow, allocator: PacketIdAllocator, name: str = "t") -> Delivery:
    """What ``Session.deliver`` does: in flight under the next free id, started under it."""
    delivery = _delivery(name)
    delivery.start(window.put_next(allocator, delivery), SEND_NOW)
    assert window.get(delivery.packet_id) is delivery
    return delivery


def _restored(packet_id: int, name: str = "t") -> Delivery:
    delivery = _delivery(name)
    delivery.restore(packet_id, released=False)
    return delivery


def test_ids_go_round_robin_and_an_acknowledged_one_is_not_reused_at_once() -> None:
    window, allocator = InflightWindow(), PacketIdAllocator()
    first, second = _send(window, allocator), _send(window, allocator)
    assert (first.packet_id, second.packet_id) == (1, 2)
    assert window.get(1) is first and window[2] is second and 2 in window
    assert window.remove(1) is first
    assert window.get(1) is None and 1 not in window and len(window) == 1
    assert window.remove(1) is None  # a late duplicate: nothing
    assert _send(window, allocator).packet_id == 3
    with pytest.raises(KeyError):
        del window[1]
    with pytest.raises(KeyError):
        window[1]


def test_an_id_in_flight_is_never_handed_out_when_the_ids_come_round_again() -> None:
    """Round robin over 1..65535, skipping an id in flight (and, to keep one delivery a slot,
    the ids whose slot it holds: here one in eight while 65534 stays in flight)."""
    window, allocator = InflightWindow(), PacketIdAllocator(start=65534)
    old = _send(window, allocator)  # 65534, never acknowledged
    given = [window.remove(_send(window, allocator).packet_id) for _ in range(50_000)]
    ids = [d.packet_id for d in given if d is not None]  # (each acknowledged at once)
    assert len(set(ids)) == 50_000 and 65534 not in ids
    assert ids[:3] == [65535, 1, 2]
    wraps = [n for n in range(1, len(ids)) if ids[n] <= ids[n - 1]]
    assert len(wraps) == 1 and ids[wraps[0]] == 1  # in order, round robin
    assert window.get(65534) is old and len(window) == 1


def test_deliveries_come_out_in_the_order_they_went_in_flight() -> None:
    window, allocator = InflightWindow(), PacketIdAllocator(start=65533)
    sent = [_send(window, allocator, f"m{n}") for n in range(5)]  # 65533..65535, 1, 2
    assert [d.packet_id for d in sent] == [65533, 65534, 65535, 1, 2]
    assert window.values() == sent
    assert window.items() == [(d.packet_id, d) for d in sent]
    assert list(window) == [65533, 65534, 65535, 1, 2]
    # restored ids, in the store's order (not the ids' order): kept in that order too
    restored = InflightWindow()
    ids = [700, 3, 9001, 12, 1]
    for packet_id in ids:
        restored[packet_id] = _restored(packet_id)
    assert list(restored) == ids


def test_the_order_holds_across_a_full_round_of_ids() -> None:
    """An id that stays in flight while the ids wrap: the dict kept it first, and so must
    the window, though a later one (60000) has a higher id and the wrap put 5..9 after it."""
    window, allocator = InflightWindow(), PacketIdAllocator(start=5)
    oldest = _send(window, allocator, "oldest")  # 5
    allocator.next_id = 60000
    later = _send(window, allocator, "later")  # 60000
    allocator.next_id = 6
    newest = [_send(window, allocator, f"n{n}") for n in range(4)]  # 6..9
    assert window.values() == [oldest, later, *newest]


def test_ids_with_the_same_low_bits_get_more_slots() -> None:
    window = InflightWindow()
    a, b, c = _restored(1), _restored(9), _restored(1 + 32768)
    window.add(a)
    window.add(b)  # the slot of 1 among 8 slots
    window.add(c)  # the slot of 1 among 16 and up to 32,768
    assert (window.get(1), window.get(9), window.get(32769)) == (a, b, c)
    assert window.get(17) is None and window.values() == [a, b, c]
    allocator = PacketIdAllocator()
    nxt = _send(window, allocator)  # not 1 (in flight)
    assert nxt.packet_id == 2 and window.values() == [a, b, c, nxt]


def test_the_same_id_again_replaces_and_keeps_its_place() -> None:
    window = InflightWindow()
    first, second = _restored(4), _restored(5)
    window.add(first)
    window.add(second)
    again = _restored(4)
    window[4] = again
    assert window.values() == [again, second] and len(window) == 2
    with pytest.raises(ValueError, match="packet id 6, not 7"):
        window[7] = _restored(6)
    with pytest.raises(ValueError, match="out of range"):
        window.add(_delivery())  # no packet id yet


def test_many_in_flight_then_cleared() -> None:
    window, allocator = InflightWindow(), PacketIdAllocator()
    sent = [_send(window, allocator) for _ in range(1000)]
    assert [d.packet_id for d in sent] == list(range(1, 1001))
    assert all(window.get(d.packet_id) is d for d in sent)
    window.clear()
    assert not window and len(window) == 0 and window.get(1) is None and window.values() == []


def test_every_id_in_flight_exhausts_the_window() -> None:
    window, allocator = InflightWindow(), PacketIdAllocator()
    for _ in range(0xFFFF):
        _send(window, allocator)
    with pytest.raises(PacketIdExhausted):
        window.put_next(allocator, _delivery())
    window.remove(300)
    assert window.put_next(allocator, _delivery()) == 300


async def test_a_resumed_session_resends_in_the_order_sent_across_the_wrap() -> None:
    broker = Broker(CoreSettings(queues=QueueLimits(100, 10_000, 100_000, 10)))
    lasting = Properties()
    lasting.session_expiry_interval = 300
    resume = Connect(client_id="c", clean_start=False, properties=lasting)
    conn, link = await connect_client(broker, "c", resume)
    conn.handle(Subscribe(1, [SubscriptionRequest("t", 1)]))
    session = conn.session
    assert session is not None
    session.packet_ids.next_id = 65534
    for n in range(4):
        broker.publish(Message("t", f"{n}".encode(), 1, False, None, "p", 0.0))
    sent = [p for p in link.packets() if isinstance(p, Publish)]
    assert [p.packet_id for p in sent] == [65534, 65535, 1, 2]
    conn.handle(Puback(65535))
    conn.handle(Disconnect())
    again, link2 = await connect_client(broker, "c", resume, drain=False)
    resent = [p for p in link2.packets() if isinstance(p, Publish)]
    assert [(p.packet_id, p.dup, p.payload) for p in resent] == [
        (65534, True, b"0"),
        (1, True, b"2"),
        (2, True, b"3"),
    ]


def test_an_idle_window_holds_no_slot_list_of_its_own_and_windows_never_share_a_delivery() -> None:
    """An idle connection's session must not pay for slots (the idle-connection memory
    target): every window with nothing ever in flight, or cleared, shares one empty list;
    the first delivery put in flight, new or restored, gives it its own, and the shared
    list stays empty for every other window."""
    idle, sending, restoring = InflightWindow(), InflightWindow(), InflightWindow()
    assert idle._slots is sending._slots is restoring._slots
    first = _send(sending, PacketIdAllocator())
    restoring.add(_restored(9))
    assert idle._slots is not sending._slots and idle._slots is not restoring._slots
    assert idle.get(first.packet_id) is None and idle.get(9) is None and 9 not in sending
    assert idle.values() == [] and len(idle) == 0
    assert idle.remove(first.packet_id) is None and sending.get(first.packet_id) is first
    sending.clear()
    assert sending._slots is idle._slots and sending.get(first.packet_id) is None
    assert _send(sending, PacketIdAllocator()).packet_id == 1 and idle.values() == []


def test_a_delivery_made_after_one_freed_starts_fresh_and_the_freed_one_holds_nothing() -> None:
    """Compiled, the last ``Delivery`` freed is kept for the next one made (mypyc's free list
    of one): the next one has its own fields only, and the kept one lets go of its message."""
    message = Message("old", b"x", 2, False, None, "p", 0.0)
    held = sys.getrefcount(message)
    old = Delivery(message, 2, True, (7,), None)
    old.start(5, SEND_NOW)
    old.record = b"record"
    old.on_done = lambda: None
    old.flight_order = 9
    assert sys.getrefcount(message) == held + 1
    del old
    assert sys.getrefcount(message) == held  # freed (or kept for reuse) without its message
    other = Message("new", b"y", 1, False, None, "p", 0.0)
    new = Delivery(other, 1, False, (), None)
    assert new.message is other
    assert (new.packet_id, new.state, new.qos, new.retain, new.subscription_ids) == (
        0,
        QUEUED,
        1,
        False,
        (),
    )
    assert (new.share, new.record, new.on_done, new.flight_order) == (None, None, None, 0)
