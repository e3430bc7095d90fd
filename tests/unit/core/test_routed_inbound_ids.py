"""A QoS 2 message routed again under its inbound message id reaches no unrecorded session twice
(``core.routed_inbound_ids``), on the virtual clock."""

from __future__ import annotations

from tests.support.virtual_broker import parked_sessions
from tests.support.virtual_loop import VirtualLoop
from xmq.core.broker import Broker
from xmq.core.cluster_ports import DurableContext
from xmq.core.fanout_slices import SLICE, Fanout
from xmq.core.message import Message
from xmq.core.routed_inbound_ids import MAX_AGE_S, RoutedInboundIds, is_inbound_message_id
from xmq.core.session import QueueLimits

INBOUND_ID = "3f9c2a/q7.0"
FORWARD_ID = "node-1/4/f17"


def _virtual(sessions: int) -> tuple[Broker, VirtualLoop]:
    """A broker on the virtual loop with ``sessions`` offline sessions on ``cmd/#`` (none
    recorded: no durable store here, as clean sessions of a cluster node)."""
    return parked_sessions(sessions, "cmd/#", 2, QueueLimits(100, 10_000_000, 1 << 30, 10))


def _route(broker: Broker, loop: VirtualLoop, forward_id: str, qos: int = 2) -> None:
    message = Message("cmd/x", b"m", qos, False, None, "publisher", 0.0)
    routed = broker.publish(message, DurableContext(None, forward_id))
    if isinstance(routed, Fanout):
        while loop.pending():
            loop.run_turn()


def _queued(broker: Broker) -> list[int]:
    return [len(session.queue) for session in broker.sessions.values()]


def test_the_id_forms() -> None:
    assert is_inbound_message_id(INBOUND_ID)
    assert not is_inbound_message_id(FORWARD_ID)
    assert not is_inbound_message_id("node-1/4/812")  # a record counter
    assert not is_inbound_message_id("")


def test_a_message_routed_again_under_its_inbound_id_reaches_no_session_twice() -> None:
    broker, loop = _virtual(3)
    _route(broker, loop, INBOUND_ID)
    assert _queued(broker) == [1, 1, 1]
    _route(broker, loop, INBOUND_ID)  # the publisher moved and sent it again: routed again
    assert _queued(broker) == [1, 1, 1]
    assert broker.routed_inbound.repeats == 1
    _route(broker, loop, "3f9c2a/q7.1")  # the id reused after PUBCOMP: a new message
    assert _queued(broker) == [2, 2, 2]


def test_only_inbound_ids_of_qos2_messages_are_remembered() -> None:
    broker, loop = _virtual(2)
    _route(broker, loop, FORWARD_ID)
    _route(broker, loop, FORWARD_ID)  # a link's frame ids are the store's to deduplicate
    _route(broker, loop, "")
    _route(broker, loop, "")
    assert _queued(broker) == [4, 4]
    assert len(broker.routed_inbound) == 0


def test_a_repeat_of_a_fan_out_larger_than_a_slice_is_kept_from_every_session() -> None:
    broker, loop = _virtual(SLICE + 5)
    _route(broker, loop, INBOUND_ID)
    _route(broker, loop, INBOUND_ID)
    assert set(_queued(broker)) == {1}


def test_an_id_is_forgotten_after_the_seen_markers_lifetime() -> None:
    broker, loop = _virtual(1)
    _route(broker, loop, INBOUND_ID)
    loop.advance(MAX_AGE_S + 1)
    _route(broker, loop, INBOUND_ID)  # as late as this, Redis takes it for a new one too
    assert _queued(broker) == [2]


def test_the_memory_is_bounded_by_count_and_by_age() -> None:
    now = [0.0]
    ids = RoutedInboundIds(lambda: now[0], limit=3, max_age_s=10)
    for n in range(5):
        assert ids.first_time(f"i/q{n}.0")
    assert len(ids) == 3
    assert ids.first_time("i/q0.0")  # the oldest went first
    assert not ids.first_time("i/q4.0")
    now[0] = 10.5
    assert ids.first_time("i/q4.0")  # too old to be a re-send
    assert len(ids) == 1
