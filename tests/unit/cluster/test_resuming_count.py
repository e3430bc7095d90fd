"""``ClusterHub.resuming_links`` (what ``may_hold`` reads per QoS 1 publish instead of walking
the links) is, after every change of ``links`` or of a link's ``resuming``, the count a walk
of the links gives: HELLO, RESUME, a link dropped to a live run, the new link replacing it,
a link dropped for good, a link closed by the hub."""

from __future__ import annotations

import asyncio
from typing import cast

from tests.support.recording_transport import RecordingTransport
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.peer_link import PeerLink
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.settings import CoreSettings


def _walked(hub: ClusterHub) -> int:
    return sum(1 for link in hub.links.values() if link.resuming)


def _agrees(hub: ClusterHub, expected: int) -> None:
    """The kept count is the walked one (``expected``), and ``may_hold`` (nothing else in
    the tables here) says whether any link resumes."""
    assert hub.resuming_links == _walked(hub) == expected
    assert hub.may_hold() is (expected > 0)


async def _hello(hub: ClusterHub, node: str, epoch: int) -> PeerLink:
    link = PeerLink(hub)
    link.connection_made(cast(asyncio.Transport, RecordingTransport()))
    link.data_received(frames.hello(node, epoch))
    await asyncio.sleep(0)
    return link


async def test_the_count_of_resuming_links_follows_every_change() -> None:
    broker = Broker(CoreSettings())
    hub = ClusterHub(broker, NodeIdentity("node-1", 3, online=True), None)
    hub.peer_alive = lambda node, epoch: node in ("node-2", "node-3")
    _agrees(hub, 0)
    first = await _hello(hub, "node-2", 7)
    _agrees(hub, 1)  # HELLO: counted frames wait for its RESUME
    other = await _hello(hub, "node-3", 1)
    _agrees(hub, 2)
    first.data_received(frames.resume(0))
    _agrees(hub, 1)
    other.data_received(frames.resume(0))
    _agrees(hub, 0)
    first.resuming = False  # (set again to what it is: no change)
    _agrees(hub, 0)
    first.connection_lost(ConnectionResetError())  # a live run: kept, to be re-linked
    assert hub.links["node-2"] is first
    _agrees(hub, 1)
    again = await _hello(hub, "node-2", 7)  # the new link replaces it in ``links``
    assert hub.links["node-2"] is again
    _agrees(hub, 1)
    again.data_received(frames.resume(0))
    _agrees(hub, 0)
    other.connection_lost(ConnectionResetError())
    _agrees(hub, 1)
    hub.drop_link(other, orphan=True)  # its run is dead: gone from ``links`` while resuming
    assert "node-3" not in hub.links
    _agrees(hub, 0)
    hub.peer_alive = lambda node, epoch: False
    again.connection_lost(ConnectionResetError())  # the run's lease is gone: dropped for good
    assert "node-2" not in hub.links
    _agrees(hub, 0)
    for task in list(hub._tasks):
        task.cancel()
