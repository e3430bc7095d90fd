"""Cluster-wide ids of forwarded messages: given by the first sender, carried in the PUBLISH /
DIRECT record, used by the receiver's records and by the sender's replay after a kill."""

from __future__ import annotations

import asyncio

from tests.support.append_recorder import AppendRecorder
from tests.support.sink_link import connect_client
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_dispatch import decode_message
from xmq.cluster.link_frames import FrameDecoder, Kind
from xmq.cluster.peer_link import PeerLink
from xmq.cluster.route_table import DurableSub
from xmq.codec.packets import Publish, Subscribe, SubscriptionRequest
from xmq.contract.message_record import decode_record, encode_record
from xmq.core.broker import Broker
from xmq.core.cluster_ports import DurableContext, NodeIdentity
from xmq.core.message import Message
from xmq.core.node_caps import set_store
from xmq.core.session import Delivery, Session
from xmq.core.settings import CoreSettings


def _message(payload: bytes, topic: str = "t") -> Message:
    return Message(topic, payload, 2, False, None, "pub", 0.0)


def _hub(node: str = "node-1", epoch: int = 3) -> tuple[ClusterHub, AppendRecorder]:
    store = AppendRecorder()
    hub = ClusterHub(Broker(CoreSettings()), NodeIdentity(node, epoch, online=True), store)  # type: ignore[arg-type]
    return hub, store


def _linked(hub: ClusterHub, node: str, epoch: int) -> PeerLink:
    link = PeerLink(hub)
    hub.link_hello(link, FrameDecoder().feed(frames.hello(node, epoch))[0][1])
    hub.recovery.resume(link, 0)  # the peer has handled none of our frames
    return link


def test_a_message_gets_its_id_when_it_first_leaves_the_node() -> None:
    hub, _ = _hub()
    first, second = _message(b"1"), _message(b"2")
    assert first.forward_id == ""  # none until it leaves the node
    assert decode_record(hub.encode(first, 2, False)).record_id == "node-1/3/f1"
    assert decode_record(hub.encode(first, 1, False)).record_id == "node-1/3/f1"  # kept
    assert decode_record(hub.encode(second, 2, False)).record_id == "node-1/3/f2"
    assert first.forward_id == "node-1/3/f1"


def _frame_id(data: bytes) -> str:
    """The record id of a PUBLISH frame (``publish_frame``)."""
    return decode_record(FrameDecoder().feed(data)[0][1]).record_id


def test_the_frame_s_id_is_made_as_bytes_and_is_the_message_s_id() -> None:
    """``publish_frame`` gives a message without an id one as UTF-8 (``RunIds.next_raw``):
    the same ids, in the same sequence, as ``encode``'s; the message reads it as its
    ``forward_id``, every later frame and record of it carries it, and an id the message
    had (an inbound QoS 2 id) is the one sent."""
    hub, _ = _hub()
    first, second, third = _message(b"1"), _message(b"2"), _message(b"3")
    assert _frame_id(hub.publish_frame(first, True)) == "node-1/3/f1"
    assert first.forward_raw == b"node-1/3/f1"
    assert _frame_id(hub.publish_frame(first, False)) == "node-1/3/f1"  # kept
    assert decode_record(hub.encode(second, 2, False)).record_id == "node-1/3/f2"
    assert _frame_id(hub.publish_frame(third, True)) == "node-1/3/f3"
    assert decode_record(hub.encode(first, 2, False)).record_id == "node-1/3/f1"
    assert first.forward_id == "node-1/3/f1" and third.forward_id == "node-1/3/f3"
    assert hub.forward_ids.last == 3  # (what a DSUB's ``since`` reads)
    inbound = _message(b"4")
    inbound.forward_id = "run/q7.1"  # given by the publisher's flow before the forward
    assert _frame_id(hub.publish_frame(inbound, True)) == "run/q7.1"
    assert hub.forward_ids.last == 3
    assert Message.from_plain(third.plain() or b"").forward_id == "node-1/3/f3"
    third.forward_id = "other"  # set: its bytes follow
    assert third.forward_raw == b"other"


async def test_the_receiver_keeps_the_sender_s_id_and_relays_it() -> None:
    sender, _ = _hub()
    record = sender.encode(_message(b"1"), 2, False)
    receiver, _ = _hub("node-2", 5)
    message = decode_message(receiver, record)[0]
    assert message.forward_id == "node-1/3/f1"
    # sent on (DIRECT to a session's new owner): the same id, not one of the relaying node
    assert decode_record(receiver.encode(message, 2, False)).record_id == "node-1/3/f1"
    # a record of a node before forward ids (empty id): the receiver gives it none
    old = encode_record("", "t", b"1", 2, False, None, "pub", 2, False)
    assert decode_message(receiver, old)[0].forward_id == ""


class ContextRecorder:
    """A durable store keeping the context the core gives each record (``record``)."""

    def __init__(self) -> None:
        self.contexts: list[DurableContext] = []

    def record(
        self, session: Session, delivery: Delivery, now: float, context: DurableContext
    ) -> bool:
        self.contexts.append(context)
        return True


async def test_records_of_a_received_publish_take_its_id() -> None:
    """Seen by the record of a local persistent subscriber (the compiled link calls the
    compiled broker directly: a patched ``publish_from_peer`` would not be called)."""
    sender, _ = _hub()
    receiver, _ = _hub("node-2", 5)
    link = _linked(receiver, "node-1", 3)
    conn, _ = await connect_client(receiver.broker, "sub")
    conn.handle(Subscribe(1, [SubscriptionRequest("t", 2)]))
    session = conn.session
    assert session is not None
    recorder = ContextRecorder()
    set_store(receiver.broker, session, recorder)  # type: ignore[arg-type]
    record = sender.encode(_message(b"1"), 2, False)
    receiver.handle_frame(link, Kind.PUBLISH, frames.publish(record)[5:])
    qos1 = Message("t", b"2", 1, False, None, "pub", 0.0)  # (a QoS 1 one too)
    receiver.handle_frame(link, Kind.PUBLISH, frames.publish(sender.encode(qos1, 1, False))[5:])
    # nothing held (the PUBLISH_ACK waits for the records), the sender's id
    assert [(context.hold, context.forward_id) for context in recorder.contexts] == [
        (None, "node-1/3/f1"),
        (None, "node-1/3/f2"),
    ]
    for _ in range(5):
        await asyncio.sleep(0)  # its PUBLISH_ACK confirmation finishes


async def test_without_a_session_with_a_store_a_qos2_repeat_still_reaches_no_one_twice() -> None:
    """The node has no session with a store (no record takes the id), but a QoS 2 message's
    inbound id still says whether it was routed here before (``Broker._route_local``): a
    re-sent one routed again by its publisher's new node reaches a clean subscriber once."""
    sender, _ = _hub()
    receiver, _ = _hub("node-2", 5)
    link = _linked(receiver, "node-1", 3)
    conn, sub_link = await connect_client(receiver.broker, "sub")
    conn.handle(Subscribe(1, [SubscriptionRequest("t", 2)]))
    assert receiver.broker.durable_sessions == 0
    for _ in range(2):
        message = _message(b"1")
        message.forward_id = "3f9c2a/q7.0"  # its publisher's inbound id (core.inbound_ids)
        receiver.handle_frame(
            link, Kind.PUBLISH, frames.publish(sender.encode(message, 2, False))[5:]
        )
    assert [p.payload for p in sub_link.packets() if isinstance(p, Publish)] == [b"1"]
    assert receiver.broker.routed_inbound.repeats == 1
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_replay_after_a_kill_uses_the_id_the_receiver_saw() -> None:
    hub, store = _hub()
    link = _linked(hub, "node-2", 5)
    hub.table.route("node-2", "t", True)
    hub.table.durable_sub("node-2", "c1", DurableSub("t", "t", 2, 0), True)
    message = _message(b"1")
    assert hub.forward(message) == 1
    sent = FrameDecoder().feed(b"".join(link._out))
    (body,) = [body for kind, body in sent if kind == Kind.PUBLISH]
    link.connection_lost(None)  # node-2 killed before its PUBLISH_ACK
    assert store.appends == [("c1", ("node-2", 5), b"1")]
    assert store.messages[0].forward_id == decode_record(body).record_id == "node-1/3/f1"
