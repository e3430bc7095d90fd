"""A session that never queues nor receives QoS 2 shares the empty queue and id set."""

from __future__ import annotations

import pytest

from xmq.core.message import Message
from xmq.core.session import NO_INBOUND_IDS, NOTHING_QUEUED, Delivery, QueueLimits, Session
from xmq.core.stats import BrokerStats


def _session(client_id: str = "c") -> Session:
    return Session(client_id, QueueLimits(10, 10_000, 100_000, 5), BrokerStats())


def _delivery() -> Delivery:
    return Delivery(Message("t", b"x", 1, False, None, None, 0.0), 1, False, (), None)


def test_fresh_sessions_share_the_empties() -> None:
    first, second = _session("a"), _session("b")
    assert first.queue is NOTHING_QUEUED and second.queue is NOTHING_QUEUED
    assert first.inbound_qos2 is NO_INBOUND_IDS and second.inbound_qos2 is NO_INBOUND_IDS


def test_an_offline_session_gets_its_own_queue_on_first_message() -> None:
    session, other = _session("a"), _session("b")
    assert session.deliver_recorded(_delivery(), 0.0)  # offline: queued
    assert session.queue is not NOTHING_QUEUED
    assert len(session.queue) == 1
    assert len(NOTHING_QUEUED) == 0 and other.queue is NOTHING_QUEUED


def test_inbound_ids_are_allocated_on_first_update() -> None:
    session = _session()
    session.inbound_for_update().add(7)
    assert session.inbound_qos2 == {7}
    assert len(NO_INBOUND_IDS) == 0


def test_mutating_a_shared_empty_raises() -> None:
    with pytest.raises(RuntimeError):
        NOTHING_QUEUED.append(_delivery())
    with pytest.raises(RuntimeError):
        NO_INBOUND_IDS.add(1)
    with pytest.raises(RuntimeError):
        NO_INBOUND_IDS.update({1})
