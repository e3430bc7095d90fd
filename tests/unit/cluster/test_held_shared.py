"""Held publisher acks for cluster-wide shared subscriptions: a SHARED frame holds the ack until
the receiving node's PUBLISH_ACK covers it (the member's record written, or the message handed
to the member); when the link dies first, until the member it is re-dispatched to has it."""

from __future__ import annotations

import asyncio

from tests.support.append_recorder import AppendRecorder
from tests.support.sink_link import connect_client
from tests.unit.cluster.test_forward_ids import ContextRecorder
from tests.unit.cluster.test_held_forwarding import Hold, Transport
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_frames import BodyReader, FrameDecoder, Kind
from xmq.cluster.peer_link import PeerLink
from xmq.codec.packets import Connect, Subscribe, SubscriptionRequest
from xmq.codec.properties import Properties
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.message import Message
from xmq.core.node_caps import set_store
from xmq.core.session import QueueLimits
from xmq.core.settings import CoreSettings

GROUP = "g"
FILTER = "t/#"


def _message(payload: bytes) -> Message:
    return Message("t/1", payload, 1, False, None, "pub", 0.0)


def _hub() -> ClusterHub:
    store = AppendRecorder()
    return ClusterHub(Broker(CoreSettings()), NodeIdentity("node-1", 3, online=True), store)  # type: ignore[arg-type]


def _linked(hub: ClusterHub, node: str, epoch: int) -> PeerLink:
    link = PeerLink(hub)
    hub.link_hello(link, FrameDecoder().feed(frames.hello(node, epoch))[0][1])
    hub.recovery.resume(link, 0)  # the peer has handled none of our frames
    hub.table.share(node, GROUP, FILTER, True)
    return link


def _shared_sent(link: PeerLink) -> list[int]:
    """Shared sequences of the SHARED frames queued on ``link`` this tick."""
    sent = FrameDecoder().feed(b"".join(link._out))
    return [int.from_bytes(body[:4], "big") for kind, body in sent if kind == Kind.SHARED]


async def test_a_shared_frame_holds_the_ack_until_the_publish_ack_covers_it() -> None:
    hub = _hub()
    link = _linked(hub, "node-2", 5)
    before = _message(b"before")
    link.send_publish(frames.publish(hub.encode(before, 1, False)), before, False)
    hold = Hold()
    assert hub.forward_shared(GROUP, FILTER, _message(b"1"), hold)
    assert not hold.routed().acked
    assert _shared_sent(link) == [1]
    link.confirmed(1)  # covers the PUBLISH only
    assert hold.pending == 1
    link.confirmed(2)
    assert hold.acked
    assert link.shared_out  # still kept for re-dispatch until the member acknowledges it


async def test_a_shared_frame_without_a_held_ack_is_counted_not_kept() -> None:
    hub = _hub()
    link = _linked(hub, "node-2", 5)
    assert hub.forward_shared(GROUP, FILTER, _message(b"1"))
    assert link.published_out == 1
    assert len(link.unconfirmed) == 0


async def test_a_dead_link_moves_the_hold_to_the_member_on_another_node() -> None:
    hub = _hub()
    dead = _linked(hub, "node-2", 5)
    hold = Hold()
    assert hub.forward_shared(GROUP, FILTER, _message(b"1"), hold)
    hold.routed()
    other = _linked(hub, "node-3", 8)  # a member on node-3 joins meanwhile
    dead.connection_lost(None)
    assert not hold.acked
    assert _shared_sent(other) == [1]
    other.confirmed(1)
    assert hold.acked


async def test_a_dead_link_with_no_member_left_releases_the_hold() -> None:
    hub = _hub()
    dead = _linked(hub, "node-2", 5)
    hold = Hold()
    hub.forward_shared(GROUP, FILTER, _message(b"1"), hold)
    hold.routed()
    dead.connection_lost(None)
    assert hold.acked
    assert hub.broker.stats.messages_dropped == 1


async def test_acknowledged_by_the_member_then_the_link_dies_releases_without_a_resend() -> None:
    hub = _hub()
    dead = _linked(hub, "node-2", 5)
    hold = Hold()
    hub.forward_shared(GROUP, FILTER, _message(b"1"), hold)
    hold.routed()
    other = _linked(hub, "node-3", 8)
    hub.handle_frame(dead, Kind.SHARED_ACK, frames.shared_ack([1])[5:])  # member acknowledged
    assert not hold.acked  # node-2's PUBLISH_ACK has not come yet
    dead.connection_lost(None)
    assert _shared_sent(other) == []  # not sent again
    assert hold.acked


async def test_a_dead_link_re_dispatches_to_a_local_member_under_the_hold() -> None:
    """A persistent local member's record takes the hold from the context (a real member: the
    compiled hub calls the compiled broker directly, a patched method would not be called)."""
    hub = _hub()
    dead = _linked(hub, "node-2", 5)
    hold = Hold()
    hub.forward_shared(GROUP, FILTER, _message(b"1"), hold)
    hold.routed()
    props = Properties(session_expiry_interval=60)
    member, _ = await connect_client(
        hub.broker, "member", Connect(client_id="member", properties=props)
    )
    member.handle(Subscribe(1, [SubscriptionRequest(f"$share/{GROUP}/{FILTER}", 1)]))
    session = member.session
    assert session is not None
    recorder = ContextRecorder()
    set_store(hub.broker, session, recorder)  # type: ignore[arg-type]
    dead.connection_lost(None)
    assert [context.hold for context in recorder.contexts] == [hold]  # the record took it
    assert hold.acked  # nothing took it here


async def test_received_shared_frames_are_counted_for_the_publish_ack() -> None:
    hub = _hub()
    link = _linked(hub, "node-2", 5)
    transport = Transport()
    link.transport = transport  # type: ignore[assignment]
    record = hub.encode(_message(b"1"), 1, False)
    hub.handle_frame(link, Kind.PUBLISH, frames.publish(record)[5:])
    hub.handle_frame(link, Kind.SHARED, frames.shared(7, GROUP, FILTER, record)[5:])
    assert link.published_in == 2
    for _ in range(5):
        await asyncio.sleep(0)
    sent = FrameDecoder().feed(b"".join(transport.written))
    acks = [body for kind, body in sent if kind == Kind.PUBLISH_ACK]
    assert acks == [(2).to_bytes(8, "big")]


async def test_a_peer_that_does_not_count_shared_frames_holds_nothing_and_is_not_counted() -> None:
    hub = _hub()
    link = PeerLink(hub)
    old_hello = frames.frame(Kind.HELLO, b"\x00\x06node-2", (5).to_bytes(8, "big"))  # no features
    hub.link_hello(link, FrameDecoder().feed(old_hello)[0][1])
    hub.table.share("node-2", GROUP, FILTER, True)
    assert not link.shared_counted
    hold = Hold()
    assert hub.forward_shared(GROUP, FILTER, _message(b"1"), hold)
    assert hold.routed().acked  # as before: its PUBLISH_ACK counts would not cover it
    assert link.published_out == 0
    record = hub.encode(_message(b"2"), 1, False)
    hub.handle_frame(link, Kind.SHARED, frames.shared(7, GROUP, FILTER, record)[5:])
    assert link.published_in == 0


async def test_a_shared_frame_dropped_for_a_quota_is_named_in_the_publish_ack() -> None:
    """The member's queue has no room: the PUBLISH_ACK names the frame with 0x97 (the
    sender's held ack then says so) and the SHARED_ACK tells the sender not to re-dispatch."""
    limits = QueueLimits(
        max_messages=0, max_session_bytes=10_000, budget_bytes=100_000, max_inflight=10
    )
    broker = Broker(CoreSettings(queues=limits))
    hub = ClusterHub(broker, NodeIdentity("node-1", 3, online=True), AppendRecorder())  # type: ignore[arg-type]
    props = Properties(session_expiry_interval=60)
    member, _ = await connect_client(
        broker, "member", Connect(client_id="member", properties=props)
    )
    member.handle(Subscribe(1, [SubscriptionRequest(f"$share/{GROUP}/{FILTER}", 1)]))
    member.connection_lost()  # offline and persistent: its queue would take it, but is full
    link = _linked(hub, "node-2", 5)
    transport = Transport()
    link.transport = transport  # type: ignore[assignment]
    record = hub.encode(_message(b"1"), 1, False)
    hub.handle_frame(link, Kind.SHARED, frames.shared(7, GROUP, FILTER, record)[5:])
    for _ in range(5):
        await asyncio.sleep(0)
    sent = FrameDecoder().feed(b"".join(transport.written))
    acks = [
        frames.read_publish_ack(BodyReader(body)) for kind, body in sent if kind == Kind.PUBLISH_ACK
    ]
    assert acks == [(1, {1: 0x97})]
    assert [body for kind, body in sent if kind == Kind.SHARED_ACK] == [frames.shared_ack([7])[5:]]
    assert broker.stats.dropped_by_reason == {"queue_full": 1}
