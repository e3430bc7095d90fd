"""Which topics a node re-reads after retained changes of them made on several nodes at once
(``store.retained_convergence``): every case ends with the node holding Redis's value."""

from __future__ import annotations

import asyncio
from typing import cast

from tests.support.recording_transport import RecordingTransport
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_frames import BodyReader, FrameDecoder, Kind
from xmq.cluster.peer_link import PeerLink
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.settings import CoreSettings
from xmq.store.retained_convergence import EARLY_KEPT, RetainedConvergence

OWN = ("", "1")
PEER = ("node-2", "node-2/1/f1")


def test_one_change_at_a_time_never_re_reads() -> None:
    node = RetainedConvergence({})
    assert not node.applied("t", OWN)
    assert not node.written("t", OWN, 5)
    assert not node.applied("t", PEER)
    assert not node.written("t", PEER, 6)
    assert node.pending == {} and node.early == {}
    assert node.revisions == {"t": 6}


def test_the_node_holding_the_older_of_two_crossing_changes_re_reads() -> None:
    # node 1 made a (Redis: revision 8), node 2 made b (revision 7) at once: a crossed b.
    one = RetainedConvergence({})
    one.applied("t", OWN)  # a, then b from node 2: node 1 holds b
    one.applied("t", PEER)
    assert not one.written("t", OWN, 8)
    assert one.written("t", PEER, 7)  # b (held here) is older than a: Redis holds a
    assert one.pending == {}
    two = RetainedConvergence({})
    two.applied("t", ("", "1"))  # b, then a from node 1: node 2 holds a
    two.applied("t", ("node-1", "node-1/1/f1"))
    assert not two.written("t", ("", "1"), 7)
    assert not two.written("t", ("node-1", "node-1/1/f1"), 8)  # a is Redis's: nothing more


def test_a_change_applied_after_the_newer_one_had_settled_here_re_reads() -> None:
    # the link was slower than Redis: node 1's own a (8) settled before b (7) arrived
    node = RetainedConvergence({})
    node.applied("t", OWN)
    assert not node.written("t", OWN, 8)
    node.applied("t", PEER)
    assert node.written("t", PEER, 7)


def test_a_held_change_not_stored_re_reads_only_if_others_overlapped_it() -> None:
    alone = RetainedConvergence({})
    alone.applied("t", OWN)
    assert not alone.written("t", OWN, 0)  # as before: no other value to converge on
    crossed = RetainedConvergence({})
    crossed.applied("t", PEER)
    crossed.applied("t", OWN)
    assert not crossed.written("t", PEER, 4)
    assert crossed.written("t", OWN, 0)  # the peer's is in Redis, this node holds its own


def test_a_lost_link_ends_the_wait_with_a_re_read() -> None:
    node = RetainedConvergence({})
    node.applied("t", OWN)
    node.applied("t", PEER)
    node.applied("u", ("node-3", "node-3/1/f1"))
    assert not node.written("t", OWN, 3)
    assert node.link_lost("node-2") == ["t"]  # node-2 never announced: Redis decides
    assert list(node.pending) == ["u"]
    assert node.link_lost("node-2") == []


def test_an_announcement_that_overtook_its_change_waits_for_it_bounded() -> None:
    node = RetainedConvergence({"t": 5})
    assert not node.written("t", PEER, 5)  # (its PUBLISH sent again on a resumed link)
    assert node.early == {PEER: 5}
    assert not node.applied("t", PEER)  # already announced: nothing to wait for
    assert node.pending == {} and node.early == {}
    for n in range(EARLY_KEPT + 10):
        node.written("t", ("node-2", f"f{n}"), 6 + n)
    assert len(node.early) == EARLY_KEPT


def test_an_announced_change_never_applied_here_and_newer_is_re_read() -> None:
    node = RetainedConvergence({"t": 5})
    assert node.written("t", PEER, 6)  # its PUBLISH lost with a link: Redis has it
    node.applied("t", OWN)
    assert not node.written("t", ("node-3", "f9"), 8)  # (in flight here: once they settle)
    assert node.written("t", OWN, 7)


def test_a_change_from_a_node_that_announces_nothing_is_left_to_redis() -> None:
    node = RetainedConvergence({})
    node.applied("t", OWN)
    node.unannounced("t")  # an older peer's change, held here now
    assert node.written("t", OWN, 9)


def test_retained_written_frames_round_trip() -> None:
    data = frames.retained_written("a/b", "node-1/3/f9", 2**40)
    [(kind, body)] = FrameDecoder().feed(data)
    assert kind == Kind.RETAINED_WRITTEN
    reader = BodyReader(body)
    assert (reader.text(), reader.text(), reader.u64()) == ("a/b", "node-1/3/f9", 2**40)
    assert frames.FEATURES & frames.FEATURE_RETAINED_WRITTEN


async def _linked(hub: ClusterHub, node: str, features: int) -> tuple[PeerLink, RecordingTransport]:
    link = PeerLink(hub)
    wire = RecordingTransport()
    link.connection_made(cast(asyncio.Transport, wire))
    link.data_received(frames.hello(node, 7, features))
    hub.recovery.resume(link, 0)
    for _ in range(5):
        await asyncio.sleep(0)
    wire.sent.clear()
    return link, wire


async def test_retained_written_goes_to_the_peers_that_read_it_and_is_handed_on() -> None:
    hub = ClusterHub(Broker(CoreSettings()), NodeIdentity("node-1", 3, online=True), None)
    heard: list[tuple[str, str, str, int]] = []
    hub.on_retained_written = lambda *fields: heard.append(fields)
    newer, new_wire = await _linked(hub, "node-2", frames.FEATURES)
    _, old_wire = await _linked(hub, "node-3", frames.FEATURES & ~frames.FEATURE_RETAINED_WRITTEN)
    hub.retained_written("t", "node-1/3/f1", 9)
    for _ in range(5):
        await asyncio.sleep(0)
    assert [kind for kind, _ in FrameDecoder().feed(bytes(new_wire.sent))] == [
        Kind.RETAINED_WRITTEN
    ]
    assert old_wire.sent == b""  # an older node: it would refuse the unknown kind
    newer.data_received(frames.retained_written("t", "node-2/7/f4", 11))
    assert heard == [("node-2", "t", "node-2/7/f4", 11)]


async def test_retained_written_while_a_link_is_down_follows_its_resume() -> None:
    hub = ClusterHub(Broker(CoreSettings()), NodeIdentity("node-1", 3, online=True), None)
    hub.peer_alive = lambda node, epoch: True  # the peer lives: its link is resumed
    lost: list[str] = []
    hub.on_link_lost = lost.append
    link, wire = await _linked(hub, "node-2", frames.FEATURES)
    wire.closed = True
    link.connection_lost(ConnectionResetError())
    for task in list(hub._tasks):
        task.cancel()  # its re-dial: the test links again itself
    assert lost == ["node-2"] and hub.links["node-2"] is link
    hub.retained_written("t", "node-1/3/f1", 9)  # nowhere to go yet
    again = PeerLink(hub)
    again_wire = RecordingTransport()
    again.connection_made(cast(asyncio.Transport, again_wire))
    again.data_received(frames.hello("node-2", 7, frames.FEATURES))
    for _ in range(5):
        await asyncio.sleep(0)
    kinds = [kind for kind, _ in FrameDecoder().feed(bytes(again_wire.sent))]
    assert Kind.RETAINED_WRITTEN not in kinds
    again.data_received(frames.resume(0))
    for _ in range(5):
        await asyncio.sleep(0)
    kinds = [kind for kind, _ in FrameDecoder().feed(bytes(again_wire.sent))]
    assert kinds[-1] == Kind.RETAINED_WRITTEN
