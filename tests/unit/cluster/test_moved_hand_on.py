"""A session handed over from here (``table.moved``): what still arrives for it goes on to its
new owner — except what a node routed with the session announced (DSUB) there, which that
node delivered to it itself. Pure logic: the appends go to ``AppendRecorder``."""

from __future__ import annotations

import asyncio

from tests.support.append_recorder import AppendRecorder
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_frames import FrameDecoder, Kind
from xmq.cluster.peer_link import PeerLink
from xmq.cluster.route_table import OrphanSub
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.message import Message
from xmq.core.settings import CoreSettings

OLD_OWNER = ("node-3", 7)


def _hub() -> tuple[ClusterHub, AppendRecorder]:
    """node-3, which handed session ``s`` (filter ``t``, QoS 2) over a moment ago."""
    store = AppendRecorder()
    hub = ClusterHub(Broker(CoreSettings()), NodeIdentity(*OLD_OWNER, online=True), store)  # type: ignore[arg-type]
    hub.table.moved.add("s", "t", OrphanSub(OLD_OWNER, 2, 0))
    return hub, store


def _linked(hub: ClusterHub, node: str, epoch: int) -> PeerLink:
    link = PeerLink(hub)
    hub.link_hello(link, FrameDecoder().feed(frames.hello(node, epoch))[0][1])
    hub.recovery.resume(link, 0)
    return link


def _receive(hub: ClusterHub, link: PeerLink, data: bytes) -> None:
    for kind, body in FrameDecoder().feed(data):
        hub.handle_frame(link, kind, body)


def _publish(sender: ClusterHub, payload: bytes) -> bytes:
    return frames.publish(sender.encode(Message("t", payload, 2, False, None, "p", 0.0), 2, False))


async def _settled() -> None:
    for _ in range(5):
        await asyncio.sleep(0)  # the PUBLISH_ACK confirmations finish


async def test_the_new_owner_s_frames_after_its_dsub_are_not_handed_back_to_it() -> None:
    hub, store = _hub()
    new_owner = ClusterHub(Broker(CoreSettings()), NodeIdentity("node-1", 2, online=True), None)
    link = _linked(hub, "node-1", 2)
    _receive(hub, link, _publish(new_owner, b"before"))  # routed before it had the session
    _receive(hub, link, frames.durable_sub(True, "s", "t", "t", 2, 0))  # it has it now
    _receive(hub, link, _publish(new_owner, b"after"))  # delivered there: not handed on
    assert [payload for _, _, payload in store.appends] == [b"before"]
    assert len(hub.table.moved) == 1  # still kept for the other nodes' late frames
    await _settled()


async def test_a_third_node_s_late_frames_still_go_on_after_the_new_owner_s_dsub() -> None:
    hub, store = _hub()
    third = ClusterHub(Broker(CoreSettings()), NodeIdentity("node-2", 4, online=True), None)
    _receive(hub, _linked(hub, "node-1", 2), frames.durable_sub(True, "s", "t", "t", 2, 0))
    _receive(hub, _linked(hub, "node-2", 4), _publish(third, b"late"))
    assert store.appends == [("s", OLD_OWNER, b"late")]  # then DIRECT to node-1 (on_moved)
    await _settled()


async def test_a_session_that_left_the_announcing_node_is_handed_on_again() -> None:
    hub, store = _hub()
    sender = ClusterHub(Broker(CoreSettings()), NodeIdentity("node-1", 2, online=True), None)
    link = _linked(hub, "node-1", 2)
    _receive(hub, link, frames.durable_sub(True, "s", "t", "t", 2, 0))
    _receive(hub, link, frames.durable_sub(False, "s", "t", "t", 2, 0))  # unsubscribed there
    _receive(hub, link, _publish(sender, b"1"))
    _receive(hub, link, frames.durable_sub(True, "s", "t", "t", 2, 0))
    _receive(hub, link, frames.durable_gone("s"))  # handed over again, to another node
    _receive(hub, link, _publish(sender, b"2"))
    assert [payload for _, _, payload in store.appends] == [b"1", b"2"]
    await _settled()


async def test_a_local_publish_is_not_handed_on_to_an_owner_it_is_sent_to() -> None:
    hub, store = _hub()
    link = _linked(hub, "node-1", 2)
    hub.forward(Message("t", b"early", 2, False, None, "p", 0.0))  # no route to the owner yet
    _receive(hub, link, frames.route(True, "t") + frames.durable_sub(True, "s", "t", "t", 2, 0))
    hub.forward(Message("t", b"routed", 2, False, None, "p", 0.0))
    sent = [kind for kind, _ in FrameDecoder().feed(b"".join(link._out))]
    assert sent.count(Kind.PUBLISH) == 1  # the routed one, to node-1, which delivers it
    assert [payload for _, _, payload in store.appends] == [b"early"]
    await _settled()
