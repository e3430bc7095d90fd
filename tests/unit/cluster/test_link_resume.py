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


def _frames(link: PeerLink, *data: bytes) -> None:
    for chunk in data:
        link.data_received(chunk)


def _collecting(link: PeerLink) -> bool:
    """Whether the link collects its peer's snapshot (until SNAPSHOT_END)."""
    return link.announced is not None


def _routes_of(hub: ClusterHub, node: str) -> set[str]:
    return {topic_filter for topic_filter, key, _ in hub.table.routes.items() if key == node}


async def test_a_resumed_link_drops_the_routes_its_peer_removed_while_it_was_down() -> None:
    broker = Broker(CoreSettings())
    hub = ClusterHub(broker, NodeIdentity("node-1", 3, online=True), None)
    hub.peer_alive = lambda node, epoch: (node, epoch) == ("node-2", 7)
    old, _ = await _link(hub)
    # a first link collects too (until its SNAPSHOT_END the peer's routes are not all known
    # here: ``cluster.peer_routes``); its snapshot is the whole truth, nothing to drop
    assert _collecting(old)
    _frames(
        old,
        frames.route(True, "a/#"),
        frames.route(True, "b/#"),
        frames.share(True, "g", "s/#"),
        frames.durable_sub(True, "c1", "k1", "d/1", 1, 0),
        frames.durable_sub(True, "c1", "k2", "d/2", 1, 0),
        frames.durable_sub(True, "c2", "k", "x/#", 2, 0),
        frames.SNAPSHOT_END_FRAME,
    )
    assert _routes_of(hub, "node-2") == {"a/#", "b/#"}
    assert not _collecting(old)
    assert hub.recovery.stale_routes == 0
    old.connection_lost(ConnectionResetError())
    assert hub.links["node-2"] is old and old.resuming
    # Meanwhile node-2 removed a/#, s/# (group g), c1's d/2, the session c2, and added n/#:
    # those deltas went nowhere. The new link's snapshot says what is left.
    new, _ = await _link_resumed(hub)
    assert _collecting(new)
    _frames(
        new,
        frames.resume(0),
        frames.route(True, "b/#"),
        frames.route(True, "n/#"),
        frames.durable_sub(True, "c1", "k1", "d/1", 1, 0),
    )
    assert _routes_of(hub, "node-2") == {"a/#", "b/#", "n/#"}  # nothing dropped before the end
    new.data_received(frames.SNAPSHOT_END_FRAME)
    assert not _collecting(new)
    assert _routes_of(hub, "node-2") == {"b/#", "n/#"}
    assert not hub.table.shares.groups_of("node-2")
    assert {c: set(subs) for c, subs in hub.table.durable["node-2"].items()} == {"c1": {"k1"}}
    assert not len(hub.table.orphans)  # a session it no longer names ended or moved
    assert hub.recovery.stale_routes == 4
    # later deltas apply as usual
    new.data_received(frames.route(False, "b/#"))
    assert _routes_of(hub, "node-2") == {"n/#"}
    for task in list(hub._tasks):
        task.cancel()


async def test_the_snapshot_ends_with_snapshot_end_only_for_a_peer_that_knows_it() -> None:
    broker = Broker(CoreSettings())
    hub = ClusterHub(broker, NodeIdentity("node-1", 3, online=True), None)
    older = frames.FEATURES & ~frames.FEATURE_SNAPSHOT_END
    for node, features, expected in (("node-2", frames.FEATURES, True), ("node-3", older, False)):
        link = PeerLink(hub)
        wire = RecordingTransport()
        link.connection_made(cast(asyncio.Transport, wire))
        link.data_received(frames.hello(node, 7, features))
        await asyncio.sleep(0)
        kinds = [kind for kind, _ in FrameDecoder().feed(bytes(wire.sent))]
        assert (Kind.SNAPSHOT_END in kinds) is expected
    for task in list(hub._tasks):
        task.cancel()
