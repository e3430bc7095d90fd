"""Shared-subscription messages of a member that left or whose session ended
(core.shared_handoff, MQTT 5.0 4.8.2)."""

from __future__ import annotations

from tests.support.sink_link import SinkLink, connect_client
from xmq.codec.packets import Connect, Publish, Pubrec, Subscribe, SubscriptionRequest
from xmq.codec.properties import Properties
from xmq.core.broker import Broker
from xmq.core.connection import ClientConnection
from xmq.core.message import Message
from xmq.core.session import QueueLimits
from xmq.core.settings import CoreSettings
from xmq.core.shared_handoff import SESSION_ENDED


def _broker(max_inflight: int = 10) -> Broker:
    limits = QueueLimits(
        max_messages=100, max_session_bytes=10_000, budget_bytes=100_000, max_inflight=max_inflight
    )
    return Broker(CoreSettings(queues=limits))


def _message(payload: bytes, qos: int) -> Message:
    return Message("t", payload, qos, False, None, "publisher", 0.0)


def _connect(
    client_id: str, expiry: int, clean_start: bool = True, receive_maximum: int | None = None
) -> Connect:
    props = Properties()
    props.session_expiry_interval = expiry
    props.receive_maximum = receive_maximum
    return Connect(client_id=client_id, clean_start=clean_start, properties=props)


async def _member(
    broker: Broker, client_id: str, expiry: int, receive_maximum: int | None = None
) -> tuple[ClientConnection, SinkLink]:
    conn, link = await connect_client(
        broker, client_id, _connect(client_id, expiry, receive_maximum=receive_maximum)
    )
    conn.handle(Subscribe(1, [SubscriptionRequest("$share/g/t", 2)]))
    link.packets()
    return conn, link


def _publishes(link: SinkLink) -> list[Publish]:
    return [p for p in link.packets() if isinstance(p, Publish)]


async def test_qos2_sent_stays_with_its_member_the_queued_one_moves() -> None:
    broker = _broker()
    one, one_link = await _member(broker, "one", 60, receive_maximum=1)
    broker.publish(_message(b"sent", 2))
    broker.publish(_message(b"queued", 2))  # past one's Receive Maximum 1: queued
    [sent] = _publishes(one_link)
    _, two_link = await _member(broker, "two", 60)
    one.connection_lost()
    assert [p.payload for p in _publishes(two_link)] == [b"queued"]  # never sent: the group's
    again, again_link = await connect_client(
        broker, "one", _connect("one", 60, clean_start=False), drain=False
    )
    [resent] = _publishes(again_link)
    assert (resent.payload, resent.dup, resent.packet_id) == (b"sent", True, sent.packet_id)
    assert again.session is not None and broker.stats.dropped_by_reason == {}


async def test_qos1_in_flight_stays_when_no_other_member_can_take_it() -> None:
    broker = _broker()
    one, _ = await _member(broker, "one", 60)
    broker.publish(_message(b"only", 1))
    one.connection_lost()  # the group has no other member: not lost, kept for this one
    _, again_link = await connect_client(
        broker, "one", _connect("one", 60, clean_start=False), drain=False
    )
    [resent] = _publishes(again_link)
    assert (resent.payload, resent.dup) == (b"only", True)
    assert broker.stats.messages_dropped == 0


async def test_an_ended_session_drops_its_qos2_and_passes_on_its_qos1() -> None:
    broker = _broker()
    one, one_link = await _member(broker, "one", 60)
    broker.publish(_message(b"q2", 2))
    broker.publish(_message(b"released", 2))
    sent = _publishes(one_link)
    one.handle(Pubrec(sent[1].packet_id))  # received by the client: nothing to lose
    one.connection_lost()
    _, two_link = await _member(broker, "two", 0)
    broker.publish(_message(b"q1", 1))  # round robin: to two
    assert [p.payload for p in _publishes(two_link)] == [b"q1"]
    # one's session ends (a clean start): the QoS 2 one sent is dropped, counted
    await connect_client(broker, "one", _connect("one", 0))
    assert _publishes(two_link) == []
    assert broker.stats.dropped_by_reason == {SESSION_ENDED: 1}


async def test_an_ended_session_passes_its_qos1_in_flight_to_another_member() -> None:
    broker = _broker()
    one, one_link = await _member(broker, "one", 60)
    broker.publish(_message(b"q1", 1))
    assert [p.payload for p in _publishes(one_link)] == [b"q1"]
    one.connection_lost()  # alone in the group: kept
    _, two_link = await _member(broker, "two", 0)
    await connect_client(broker, "one", _connect("one", 0))  # ends the old session
    assert [p.payload for p in _publishes(two_link)] == [b"q1"]
    assert broker.stats.messages_dropped == 0


async def test_a_peer_is_told_when_qos2_is_sent_and_qos1_when_acknowledged() -> None:
    broker = _broker()
    await _member(broker, "one", 60)
    done: list[bytes] = []
    broker.publish_shared_from_peer("g", "t", _message(b"q2", 2), lambda: done.append(b"q2"))
    broker.publish_shared_from_peer("g", "t", _message(b"q1", 1), lambda: done.append(b"q1"))
    assert done == [b"q2"]  # the QoS 2 one is its member's now: never re-dispatched
