"""A resumed session under its user's current rules (``session_access.recheck_resumed``)."""

from __future__ import annotations

from tests.support.sink_link import connect_client
from xmq.auth.acl import AclRule, Action, Permission, RuleAcl
from xmq.codec.packets import Publish, Subscribe, SubscriptionRequest
from xmq.core.broker import Broker
from xmq.core.memory_cost import MESSAGE_COST, WORDS_DELIVERY_COST
from xmq.core.message import Message
from xmq.core.session import QueueLimits
from xmq.core.session_access import recheck_resumed
from xmq.core.settings import CoreSettings


async def test_revoked_subscriptions_and_unreadable_messages_are_dropped() -> None:
    broker = Broker(CoreSettings(queues=QueueLimits(100, 100_000, 1_000_000, 2)))
    conn, link = await connect_client(broker, "c")
    conn.handle(Subscribe(1, [SubscriptionRequest("a/#", 2), SubscriptionRequest("b/#", 1)]))
    for topic in ("a/1", "b/1", "a/2", "b/2", "a/3"):  # 2 in flight, 3 queued
        broker.publish(Message(topic, b"x", 2 if topic.startswith("a") else 1, False, None, "p", 0))
    sent = [p for p in link.packets() if isinstance(p, Publish)]
    assert [p.topic for p in sent] == ["a/1", "b/1"]
    session = conn.session
    assert session is not None
    session.on_pubrec(sent[0].packet_id, 0, 0.0)  # a/1 is released: only its PUBREL is owed
    queued_bytes = session.queued_bytes
    # the user may read b/# only now
    acl = RuleAcl(
        [AclRule(Permission.ALLOW, Action.BOTH, "b/#")], username="u", groups=(), client_id="c"
    )
    assert recheck_resumed(broker, session, acl) == (1, 2)  # a/#; a/2 and a/3 (queued)
    assert list(session.subscriptions) == ["b/#"]
    assert [d.message.topic for d in session.inflight.values()] == ["a/1", "b/1"]
    assert [d.message.topic for d in session.queue] == ["b/2"]
    # the dropped deliveries' bytes are released: only b/2 is still charged, to the session
    # and to the broker's budget
    (left,) = session.queue
    assert session.queued_bytes == WORDS_DELIVERY_COST + left.message.size < queued_bytes
    assert broker.stats.queued_bytes == WORDS_DELIVERY_COST + MESSAGE_COST + 2 * left.message.size
    assert broker.stats.dropped_by_reason == {"acl_revoked": 2}
    assert broker.stats.subscriptions_revoked == 1
    assert broker.publish(Message("a/4", b"x", 1, False, None, "p", 0)) == 0


async def test_an_unreleased_message_in_flight_is_dropped_too() -> None:
    broker = Broker(CoreSettings())
    conn, link = await connect_client(broker, "c")
    conn.handle(Subscribe(1, [SubscriptionRequest("a/#", 1)]))
    broker.publish(Message("a/1", b"x", 1, False, None, "p", 0))
    session = conn.session
    assert session is not None and len(session.inflight) == 1
    acl = RuleAcl([], username="u", groups=(), client_id="c")  # nothing allowed any more
    assert recheck_resumed(broker, session, acl) == (1, 1)
    assert not session.inflight and not session.subscriptions
