"""Messages for the sessions of a live owner run this node is not linked to yet
(``RouteTable.pending``: read from Redis at start or on rejoining): they wait for its link,
the publisher's ack held, instead of being routed nowhere (0x10; issue 12)."""

from __future__ import annotations

from tests.support.append_recorder import AppendRecorder
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_frames import BodyReader, FrameDecoder, Kind
from xmq.cluster.peer_link import PeerLink
from xmq.cluster.route_table import DurableSub, OrphanSub, PendingOrphans
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.message import Message
from xmq.core.settings import CoreSettings


class Hold:
    """A held ack: counts holds; ``acked`` once the last one is released."""

    def __init__(self) -> None:
        self.pending = 1
        self.acked = False

    def hold(self) -> None:
        assert not self.acked
        self.pending += 1

    def release(self) -> None:
        self.pending -= 1
        assert self.pending >= 0
        self.acked = self.pending == 0

    def fail(self) -> None:
        raise AssertionError("no write fails here")

    def undelivered(self, reason: int) -> None:
        raise AssertionError("nothing is delivered nowhere here")


def _message(payload: bytes) -> Message:
    return Message("t/1", payload, 1, False, None, "pub", 0.0)


def _hub_with_pending(owner: tuple[str, int]) -> tuple[ClusterHub, AppendRecorder]:
    store = AppendRecorder()
    hub = ClusterHub(Broker(CoreSettings()), NodeIdentity("node-2", 3, online=True), store)  # type: ignore[arg-type]
    pending = PendingOrphans("127.0.0.1:1")
    pending.index.add("sub", "t/+", OrphanSub(owner, 1, 0))
    hub.table.pending[owner] = pending
    return hub, store


def _link(hub: ClusterHub, node: str, epoch: int) -> PeerLink:
    link = PeerLink(hub)
    hub.link_hello(link, FrameDecoder().feed(frames.hello(node, epoch))[0][1])
    hub.recovery.resume(link, 0)  # the peer has handled none of our frames
    return link


def _directs(link: PeerLink) -> list[tuple[str, bytes]]:
    out = []
    for kind, body in FrameDecoder().feed(b"".join(link._out)):
        if kind == Kind.DIRECT:
            reader = BodyReader(body)
            out.append((reader.text(), reader.rest()))
    return out


async def test_a_message_for_a_live_owner_not_linked_waits_for_its_link() -> None:
    hub, store = _hub_with_pending(("node-1", 7))
    hold = Hold()
    assert hub.forward(_message(b"m1"), hold) == 1  # counted: not 0x10
    assert len(hub.link_wait) == 1
    hold.release()  # routing is over
    assert not hold.acked  # waits for the owner
    link = _link(hub, "node-1", 7)  # its link forms: the message goes to it, in order
    [(client_id, record)] = _directs(link)
    assert client_id == "sub"
    assert b"m1" in record
    assert hold.pending == 1  # until the owner confirms its record
    link.confirmed(1)
    assert hold.pending == 0
    assert store.appends == []


async def test_a_linked_owner_s_routes_take_its_messages() -> None:
    hub, store = _hub_with_pending(("node-1", 7))
    link = _link(hub, "node-1", 7)
    hub.table.route("node-1", "t/+", True)  # its snapshot
    hub.table.durable_sub("node-1", "sub", DurableSub("t/+", "t/+", 1, 0), True)
    assert hub.forward(_message(b"m1")) == 1  # one PUBLISH frame, no DIRECT besides
    assert _directs(link) == []
    assert len(hub.link_wait) == 0
    assert store.appends == []


async def test_a_session_another_linked_node_announced_is_left_to_it() -> None:
    hub, store = _hub_with_pending(("node-1", 7))
    link = _link(hub, "node-3", 2)  # the session moved to node-3, which announced it
    hub.table.route("node-3", "t/+", True)
    hub.table.durable_sub("node-3", "sub", DurableSub("t/+", "t/+", 1, 0), True)
    assert hub.forward(_message(b"m1")) == 1  # the PUBLISH frame to node-3 only
    assert _directs(link) == []
    assert len(hub.link_wait) == 0


async def test_an_owner_run_older_than_the_linked_one_is_dead_its_queue_gets_it() -> None:
    hub, store = _hub_with_pending(("node-1", 7))
    _link(hub, "node-1", 8)  # node-1 restarted: the pending run is dead
    assert hub.forward(_message(b"m1")) == 1
    assert store.appends == [("sub", ("node-1", 7), b"m1")]


async def test_a_linked_owner_that_has_not_announced_the_session_gets_it_directly() -> None:
    hub, store = _hub_with_pending(("node-1", 7))
    link = _link(hub, "node-1", 7)  # linked; its claim of the session is still attaching it
    hold = Hold()
    assert hub.forward(_message(b"m1"), hold) == 1
    assert [client_id for client_id, _ in _directs(link)] == ["sub"]
    hold.release()
    assert hold.pending == 1  # until node-1 confirms its record (or its queue's)
    link.confirmed(1)
    assert hold.pending == 0
    assert store.appends == []


async def test_a_session_another_node_announced_since_no_longer_waits_for_its_old_owner() -> None:
    hub, _ = _hub_with_pending(("node-1", 7))
    _link(hub, "node-3", 2)
    hub.table.durable_sub("node-3", "sub", DurableSub("t/+", "t/+", 1, 0), True)  # moved there
    assert len(hub.table.pending[("node-1", 7)].index) == 0
    assert hub.forward(_message(b"m1")) == 0  # (node-3 announced no route for it here)
    assert len(hub.link_wait) == 0
