"""A dropped link to a live run is resumed: the new link inherits the counts, the peer's
RESUME says where to start, and only the frames it never handled are sent again, in order."""

from __future__ import annotations

import asyncio
from typing import cast

from tests.support.recording_transport import RecordingTransport
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_frames import FrameDecoder, Kind
from xmq.cluster.peer_link import PeerLink
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.message import Message
from xmq.core.settings import CoreSettings


def _publishes(wire: RecordingTransport) -> list[bytes]:
    return [body for kind, body in FrameDecoder().feed(bytes(wire.sent)) if kind == Kind.PUBLISH]


async def _link(hub: ClusterHub) -> tuple[PeerLink, RecordingTransport]:
    link = PeerLink(hub)
    wire = RecordingTransport()
    link.connection_made(cast(asyncio.Transport, wire))
    link.data_received(frames.hello("node-2", 7))
    link.data_received(frames.resume(0))
    await asyncio.sleep(0)
    wire.sent.clear()
    return link, wire


async def test_frames_the_peer_never_handled_are_sent_again_on_the_new_link() -> None:
    broker = Broker(CoreSettings())
    hub = ClusterHub(broker, NodeIdentity("node-1", 3, online=True), None)
    hub.peer_alive = lambda node, epoch: (node, epoch) == ("node-2", 7)
    old, _ = await _link(hub)
    hub.table.route("node-2", "t", True)
    hub.table.durable["node-2"] = {"c": {}}  # it has persistent sessions: frames are kept
    messages = [Message("t", f"{n}".encode(), 1, False, None, "p", 0.0) for n in range(5)]
    for message in messages[:3]:
        hub.forward(message)
    await asyncio.sleep(0)
    old.connection_lost(ConnectionResetError())  # (the new link's HELLO comes before re-dialing)
    assert hub.links["node-2"] is old and old.resuming  # suspended, not orphaned
    assert not len(hub.table.orphans)
    for message in messages[3:]:
        hub.forward(message)  # kept while the link is down
    new, wire = await _link_resumed(hub)
    assert hub.links["node-2"] is new and hub.recovery.resumed == 1
    new.data_received(frames.resume(2))
    await asyncio.sleep(0)
    again = _publishes(wire)
    assert [body[-1:] for body in again] == [b"2", b"3", b"4"]  # in order, from the third
    assert new.published_out == 5
    new.data_received(frames.publish_ack(5))
    assert not new.unconfirmed
    for task in list(hub._tasks):
        task.cancel()


async def _link_resumed(hub: ClusterHub) -> tuple[PeerLink, RecordingTransport]:
    link = PeerLink(hub)
    wire = RecordingTransport()
    link.connection_made(cast(asyncio.Transport, wire))
    link.data_received(frames.hello("node-2", 7))
    await asyncio.sleep(0)
    assert link.resuming  # counted frames wait for the peer's RESUME
    sent = FrameDecoder().feed(bytes(wire.sent))
    assert (Kind.RESUME, frames.resume(0)[5:]) in sent  # we handled none of its frames
    wire.sent.clear()
    return link, wire
