"""One PUBLISH's fan-out to more than a slice of sessions, routed a slice per loop turn."""

from __future__ import annotations

import asyncio
from typing import cast

from tests.support.sink_link import connect_client
from tests.support.virtual_loop import VirtualLoop
from xmq.codec.packets import Puback, Publish, Pubrec
from xmq.codec.reason_codes import ReasonCode
from xmq.core.broker import Broker
from xmq.core.fanout_slices import PLANNED_PER_DELIVERY, SLICE, Fanout
from xmq.core.message import Message
from xmq.core.session import QueueLimits, Session, Subscription
from xmq.core.session_lifecycle import end_session
from xmq.core.settings import CoreSettings


def _broker(sessions: int, max_session_bytes: int = 10_000_000) -> Broker:
    queues = QueueLimits(100, max_session_bytes, 1 << 30, 10)
    broker = Broker(CoreSettings(queues=queues))
    for n in range(sessions):  # offline persistent sessions on bcast/#
        session = Session(f"s{n}", broker.settings.queues, broker.stats, expiry_s=600)
        broker.sessions[session.client_id] = session
        broker.subscribe(session, Subscription(session, "bcast/#", 1))
    return broker


def _virtual(sessions: int) -> tuple[Broker, VirtualLoop]:
    broker = _broker(sessions)
    loop = VirtualLoop()
    broker._loop = cast(asyncio.AbstractEventLoop, loop)
    return broker, loop


def _message(payload: bytes, origin: str = "p", topic: str = "bcast/x") -> Message:
    return Message(topic, payload, 1, False, None, origin, 0.0)


def _payloads(session: Session) -> list[bytes]:
    return [delivery.message.payload for delivery in session.queue]


def _run(broker: Broker, loop: VirtualLoop, fanout: object) -> tuple[list[int], list[int]]:
    """Run the loop until the fan-out is over: deliveries per turn, and what ``routed`` got."""
    assert isinstance(fanout, Fanout)
    routed: list[int] = []
    fanout.routed = lambda count, dropped: routed.append(count)
    per_turn = []
    while loop.pending():
        before = broker.stats.deliveries_routed
        loop.run_turn()
        per_turn.append(broker.stats.deliveries_routed - before)
    return per_turn, routed


def test_a_plan_of_one_slice_is_routed_at_once_and_a_larger_one_a_slice_per_turn() -> None:
    broker, loop = _virtual(SLICE)
    assert broker.publish(_message(b"small")) == SLICE  # the normal path: whole, now
    sessions = 3 * SLICE + 1
    broker, loop = _virtual(sessions)
    fanout = broker.publish(_message(b"big"))
    assert broker.stats.deliveries_routed == 0  # nothing in the publisher's turn
    per_turn, routed = _run(broker, loop, fanout)
    # first turn: the plan is built (4 subscriptions for the work of a delivery), then routed
    planning = -(-sessions // PLANNED_PER_DELIVERY)
    assert per_turn == [SLICE - planning, SLICE, SLICE, sessions - 3 * SLICE + planning]
    assert routed == [sessions]  # once, after the last slice
    assert _payloads(broker.sessions[f"s{3 * SLICE}"]) == [b"big"]
    assert len(broker.plans.entries["bcast/x"]) == sessions  # cached: no change meanwhile
    per_turn, routed = _run(broker, loop, broker.publish(_message(b"again")))
    assert per_turn == [SLICE, SLICE, SLICE, 1]
    assert routed == [sessions]


def test_a_plan_built_while_subscriptions_change_is_not_cached() -> None:
    broker, loop = _virtual(4 * PLANNED_PER_DELIVERY * SLICE)  # planned over 4 turns
    fanout = broker.publish(_message(b"m"))
    loop.run_turn()
    late = Session("late", broker.settings.queues, broker.stats, expiry_s=600)
    broker.sessions["late"] = late
    broker.subscribe(late, Subscription(late, "bcast/x", 1))
    per_turn, routed = _run(broker, loop, fanout)
    assert routed == [4 * PLANNED_PER_DELIVERY * SLICE]  # matched before it subscribed
    assert "bcast/x" not in broker.plans.entries
    _run(broker, loop, broker.publish(_message(b"n", origin="q")))  # planned again
    assert _payloads(late) == [b"n"]
    assert len(broker.plans.entries["bcast/x"]) == 4 * PLANNED_PER_DELIVERY * SLICE + 1


def test_a_session_gone_before_its_slice_gets_nothing() -> None:
    broker, loop = _virtual(2 * SLICE)
    last = broker.sessions[f"s{2 * SLICE - 1}"]
    fanout = broker.publish(_message(b"m"))
    assert isinstance(fanout, Fanout)
    counts: list[int] = []
    fanout.routed = lambda count, dropped: counts.append(count)
    end_session(broker, last)
    while loop.pending():
        loop.run_turn()
    assert _payloads(last) == []
    assert _payloads(broker.sessions["s0"]) == [b"m"]
    assert counts == [2 * SLICE - 1]


def test_a_publishers_next_message_waits_behind_its_fan_out_and_others_do_not() -> None:
    broker, loop = _virtual(2 * SLICE)
    first = broker.publish(_message(b"1", origin="p"))
    assert isinstance(first, Fanout)
    one = broker.sessions["s0"]
    broker.subscribe(one, Subscription(one, "solo", 1))
    second = broker.publish(_message(b"2", origin="p"))  # e.g. its will, to every session
    assert isinstance(second, Fanout)
    small = broker.publish(_message(b"2", origin="p", topic="solo"))  # behind too
    assert isinstance(small, Fanout)
    assert broker.publish(_message(b"q", origin="q", topic="solo")) == 1  # another publisher
    done: list[str] = []
    first.routed = lambda count, dropped: done.append("first")
    second.routed = lambda count, dropped: done.append("second")
    small.routed = lambda count, dropped: done.append("small")
    while loop.pending():
        loop.run_turn()
    assert done == ["first", "second", "small"]
    assert _payloads(broker.sessions[f"s{2 * SLICE - 1}"]) == [b"1", b"2"]
    assert _payloads(one) == [b"q", b"1", b"2", b"2"]
    assert broker.fanouts.waiting == {}
    assert broker.publish(_message(b"3", origin="p", topic="solo")) == 1  # nothing to wait for


async def _settle(broker: Broker) -> None:
    for _ in range(100):
        if not broker.fanouts.waiting:
            return
        await asyncio.sleep(0)
    raise AssertionError("the fan-out never finished")


async def test_the_puback_goes_after_the_last_slice_with_the_quota_reason() -> None:
    broker = _broker(SLICE + 1, max_session_bytes=10)  # no queue can take a message
    pub, link = await connect_client(broker, "pub")
    pub.handle(Publish("bcast/x", b"m", qos=1, packet_id=9))
    assert link.packets() == []
    assert pub.fanning_out == 1
    await _settle(broker)
    assert pub.fanning_out == 0
    [ack] = link.packets()
    assert isinstance(ack, Puback) and ack.packet_id == 9
    assert ack.reason_code == ReasonCode.QUOTA_EXCEEDED  # not "success", not 0x10
    assert broker.stats.quota_drops == SLICE + 1


async def test_a_qos2_publish_resent_during_its_fan_out_is_not_routed_twice() -> None:
    broker = _broker(SLICE + 1)
    pub, link = await connect_client(broker, "pub")
    pub.handle(Publish("bcast/x", b"m", qos=2, packet_id=4))
    assert pub.fanning_out == 1 and link.packets() == []
    pub.handle(Publish("bcast/x", b"m", qos=2, packet_id=4, dup=True))  # e.g. after a reconnect
    assert [type(p) for p in link.packets()] == [Pubrec]  # received already: not routed again
    await _settle(broker)
    assert [p.packet_id for p in link.packets() if isinstance(p, Pubrec)] == [4]
    assert _payloads(broker.sessions["s0"]) == [b"m"]
    assert _payloads(broker.sessions[f"s{SLICE}"]) == [b"m"]
