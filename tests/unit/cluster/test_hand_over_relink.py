"""A link between a session's old and new owner that drops and resumes during the hand-over.

The new owner (node-1) routed a PUBLISH frame to the old owner (node-3) before it had the
session; the link dropped before node-3 read it. node-1 then attached the session (its DSUB
lost with the link) and routed another message, delivered there to the session itself. On
the resumed link node-1's route snapshot, naming the session, comes before the frames sent
again. node-3 must hand the first message on to the session (it was routed before the session
was on node-1: nobody else delivers it) and not the second (node-1 delivered it). Before DSUB
carried ``since``, node-3 took every frame after the snapshot for one routed with the session
there: the first message was lost (docs/cluster.md, "Limits")."""

from __future__ import annotations

import asyncio
from typing import cast

from tests.support.append_recorder import AppendRecorder
from tests.support.recording_transport import RecordingTransport
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_frames import FrameDecoder
from xmq.cluster.peer_link import PeerLink
from xmq.cluster.route_table import DurableSub, OrphanSub
from xmq.core.broker import Broker
from xmq.core.cluster_ports import DurableContext, NodeIdentity
from xmq.core.message import Message
from xmq.core.node_caps import set_store
from xmq.core.session import Delivery, Session, Subscription
from xmq.core.settings import CoreSettings

OLD_OWNER = ("node-3", 7)

Side = tuple[PeerLink, RecordingTransport]


class Records:
    """The new owner's store: the records it was asked for (client id, payload)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes]] = []

    def record(
        self, session: Session, delivery: Delivery, now: float, context: DurableContext
    ) -> bool:
        self.records.append((session.client_id, delivery.message.payload))
        return True


def _connect(hub: ClusterHub) -> Side:
    link = PeerLink(hub)
    wire = RecordingTransport()
    link.connection_made(cast(asyncio.Transport, wire))  # its HELLO goes out
    return link, wire


async def _carry(here: Side, there: Side) -> None:
    """Carry what each end wrote to the other, until both are quiet."""
    for _ in range(20):
        for _ in range(5):
            await asyncio.sleep(0)
        to_there, to_here = bytes(here[1].sent), bytes(there[1].sent)
        here[1].sent.clear()
        there[1].sent.clear()
        if not to_there and not to_here:
            return
        if to_there:
            there[0].data_received(to_there)
        if to_here:
            here[0].data_received(to_here)
    raise AssertionError("the ends never went quiet")


def _drop(*sides: Side) -> None:
    """The connection resets under both ends (both runs live: suspended, not orphaned); what
    was written and not read yet is lost with it."""
    for link, wire in sides:
        wire.sent.clear()
        wire.closed = True
        link.connection_lost(ConnectionResetError())
        assert link.hub.links[link.peer_node] is link and link.resuming
        for task in list(link.hub._tasks):
            task.cancel()  # its re-dial: the test links the ends again itself


async def test_a_frame_routed_before_the_session_moved_in_is_handed_on_after_a_relink() -> None:
    store = AppendRecorder()
    old = ClusterHub(Broker(CoreSettings()), NodeIdentity(*OLD_OWNER, online=True), store)  # type: ignore[arg-type]
    old.table.moved.add("s", "t", OrphanSub(OLD_OWNER, 1, 0))  # handed over a moment ago
    broker = Broker(CoreSettings())
    new = ClusterHub(broker, NodeIdentity("node-1", 2, online=True), None)
    for hub in (old, new):
        hub.peer_alive = lambda node, epoch: True
    here, there = _connect(old), _connect(new)
    await _carry(here, there)
    # node-3 still routes t (its DGONE not read yet), and has other persistent subscribers
    # on it: node-1 keeps its frames to node-3 until node-3 confirms their records
    new.table.route("node-3", "t", True)
    new.table.durable_sub("node-3", "other", DurableSub("t", "t", 1, 0), True)
    new.forward(Message("t", b"before", 1, False, None, "p", 0.0))  # the session not here yet
    _drop(here, there)  # node-3 never read it
    session = Session("s", broker.settings.queues, broker.stats, expiry_s=600)
    broker.sessions["s"] = session
    sub = Subscription(session, "t", 1)
    broker.subscribe(session, sub)
    records = Records()
    set_store(broker, session, records)  # type: ignore[arg-type]  # persistent: its records here
    new.subscription_changed(session, sub, True)  # its claim attached it: DSUB (link down)
    after = Message("t", b"after", 1, False, None, "p", 0.0)
    assert broker.publish(after) == 1  # delivered here to the session, and sent to node-3
    new.forward(after)
    assert records.records == [("s", b"after")]
    here, there = _connect(old), _connect(new)  # re-linked: snapshot first, then the frames
    await _carry(here, there)
    assert old.recovery.resumed == new.recovery.resumed == 1
    assert [payload for _, _, payload in store.appends] == [b"before"]  # on to the session


async def test_a_dsub_says_since_when_and_an_older_node_s_keeps_the_link_order_rule() -> None:
    store = AppendRecorder()
    old = ClusterHub(Broker(CoreSettings()), NodeIdentity(*OLD_OWNER, online=True), store)  # type: ignore[arg-type]
    old.table.moved.add("s", "t", OrphanSub(OLD_OWNER, 1, 0))
    sender = ClusterHub(Broker(CoreSettings()), NodeIdentity("node-1", 2, online=True), None)
    link = PeerLink(old)
    old.link_hello(link, FrameDecoder().feed(frames.hello("node-1", 2))[0][1])
    old.recovery.resume(link, 0)

    def receive(data: bytes) -> None:
        for kind, body in FrameDecoder().feed(data):
            old.handle_frame(link, kind, body)

    def publish(payload: bytes) -> bytes:  # numbered f1, f2, ... by node-1
        message = Message("t", payload, 1, False, None, "p", 0.0)
        return frames.publish(sender.encode(message, 1, False))

    first = publish(b"1")
    receive(frames.durable_sub(True, "s", "t", "t", 1, 0))  # an older node: no ``since``
    assert old.table.durable["node-1"]["s"]["t"].since == -1
    receive(first)  # taken for routed with the session there, as before
    assert store.appends == []
    receive(frames.durable_sub(True, "s", "t", "t", 1, 0, since=2))
    assert old.table.durable["node-1"]["s"]["t"].since == 2
    receive(publish(b"2"))  # f2: routed before node-1 had the session: handed on
    receive(publish(b"3"))  # f3: routed with it there: node-1 delivered it
    assert [payload for _, _, payload in store.appends] == [b"2"]
    for _ in range(5):
        await asyncio.sleep(0)  # the PUBLISH_ACK confirmations finish
