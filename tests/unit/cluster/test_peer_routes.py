"""A starting node opens its listeners once it knows every live peer's routes: each peer's link
up and its route snapshot ended (``SNAPSHOT_END``), or after a bounded wait
(``cluster.peer_routes``). Before, it listened at once: a message published on it for a
subscription a peer made after this node read Redis, before their link formed, matched nothing
here (PUBACK 0x10, lost; ``tests/integration/cluster/test_start_gate.py`` plays it)."""

from __future__ import annotations

from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_frames import FrameDecoder
from xmq.cluster.peer_link import PeerLink
from xmq.cluster.peer_routes import (
    POLL_S,
    peers_without_routes,
    start_wait_s,
    wait_for_peer_routes,
)
from xmq.contract.records import NodeLease
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.settings import CoreSettings


def _lease(node: str, epoch: int) -> NodeLease:
    return NodeLease(
        node_id=node, pod_name=node, pod_uid="u", address=f"{node}:1", epoch=epoch, started_at=0
    )


PEERS = {
    "node-1": _lease("node-1", 4),
    "node-2": _lease("node-2", 2),
    "node-3": _lease("node-3", 1),
}


def _hub() -> ClusterHub:
    return ClusterHub(Broker(CoreSettings()), NodeIdentity("node-3", 1, online=True), None)


def _frame(hub: ClusterHub, link: PeerLink, data: bytes) -> None:
    for kind, body in FrameDecoder().feed(data):
        if kind == frames.Kind.HELLO:
            hub.link_hello(link, body)
        else:
            hub.handle_frame(link, kind, body)


async def test_a_new_links_peer_counts_once_its_route_snapshot_has_ended() -> None:
    hub = _hub()
    assert peers_without_routes(hub.links, PEERS, "node-3") == ["node-1", "node-2"]
    link = PeerLink(hub)
    _frame(hub, link, frames.hello("node-2", 2))
    # linked, but its snapshot is on its way: a message published now would match nothing
    assert peers_without_routes(hub.links, PEERS, "node-3") == ["node-1", "node-2"]
    _frame(hub, link, frames.route(True, "t/sub"))
    _frame(hub, link, frames.SNAPSHOT_END_FRAME)
    assert peers_without_routes(hub.links, PEERS, "node-3") == ["node-1"]
    assert [node for node, _ in hub.table.routes.match("t/sub")] == ["node-2"]


async def test_a_link_to_another_run_or_a_closed_one_does_not_count() -> None:
    hub = _hub()
    link = PeerLink(hub)
    _frame(hub, link, frames.hello("node-1", 3))  # the lease says epoch 4
    _frame(hub, link, frames.SNAPSHOT_END_FRAME)
    assert "node-1" in peers_without_routes(hub.links, PEERS, "node-3")
    assert peers_without_routes(hub.links, {"node-1": _lease("node-1", 3)}, "node-3") == []
    link.closed = True
    assert peers_without_routes(hub.links, {"node-1": _lease("node-1", 3)}, "node-3") == ["node-1"]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    async def sleep(self, seconds: float) -> None:
        self.now = round(self.now + seconds, 6)


async def test_the_wait_ends_once_every_live_peer_is_known() -> None:
    hub = _hub()
    clock = Clock()
    peers = dict(PEERS)
    links: dict[str, PeerLink] = {}

    def read_peers() -> dict[str, NodeLease]:
        # node-2's link and snapshot arrive at 0.5 s; node-1's lease is gone at 1 s
        if clock.now >= 0.5 and not links:
            link = PeerLink(hub)
            _frame(hub, link, frames.hello("node-2", 2))
            _frame(hub, link, frames.SNAPSHOT_END_FRAME)
            links.update(hub.links)
        if clock.now >= 1.0:
            peers.pop("node-1", None)
        return peers

    missing = await wait_for_peer_routes(
        hub.links, read_peers, "node-3", 5.0, lambda: clock.now, clock.sleep
    )
    assert missing == []
    assert 1.0 <= clock.now < 1.0 + 2 * POLL_S


async def test_the_wait_is_bounded() -> None:
    hub = _hub()
    clock = Clock()
    wait_s = start_wait_s(4.0)
    assert wait_s == 0.8 + 0.8 + 1.0
    missing = await wait_for_peer_routes(
        hub.links, lambda: PEERS, "node-3", wait_s, lambda: clock.now, clock.sleep
    )
    assert missing == ["node-1", "node-2"]  # paused or partitioned: the node opens anyway
    assert wait_s <= clock.now < wait_s + 2 * POLL_S
