"""A node link's HELLO: who the peer is, what it reads, and whether the link resumes one.

Each end sends HELLO first: its node id, its run (the epoch of its lease) and a byte of
feature bits (``link_frames.FEATURE_*``); a feature is used when both ends set it, so an older
node on the other end keeps working. A second link to the same run of a node, both ends
resumable, inherits the first one's kept frames and counts and is resumed (``RESUME``);
a link to a newer run replaces the older run's, whose persistent sessions become orphans.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from xmq.cluster import link_dispatch, link_ledger
from xmq.cluster import link_frames as frames
from xmq.cluster.link_frames import BodyReader
from xmq.cluster.route_table import AnnouncedRoutes

if TYPE_CHECKING:
    from xmq.cluster.cluster_hub import ClusterHub
    from xmq.cluster.peer_link import PeerLink

log = logging.getLogger("xmq.cluster")


def hello(hub: ClusterHub, link: PeerLink, body: bytes) -> None:
    """The peer's HELLO: its node id, run (epoch) and features; a link to the same run
    resumed, else a new one (an older run's dropped); then our routes' snapshot."""
    reader = BodyReader(body)
    node, epoch, features = reader.text(), reader.u64(), reader.rest()[:1]
    if not hub.identity.online or node == hub.identity.node_id:
        link.close()
        return
    bits = features[0] if features else 0
    link.shared_counted = bool(bits & frames.FEATURE_SHARED_COUNTED)
    link.resumable = bool(bits & frames.FEATURE_RESUME)
    link.heartbeat = bool(bits & frames.FEATURE_HEARTBEAT)
    link.snapshot_end = bool(bits & frames.FEATURE_SNAPSHOT_END)
    link.retained_written = bool(bits & frames.FEATURE_RETAINED_WRITTEN)
    hub.reads_shared_durable(node, bool(bits & frames.FEATURE_SHARED_DURABLE))
    link.unkept_publish = bool(bits & frames.FEATURE_UNKEPT_PUBLISH)
    existing = hub.links.get(node)
    resumed = False
    if existing is not None and existing is not link:
        if existing.peer_epoch > epoch:
            link.close()
            return
        if existing.peer_epoch == epoch and existing.resumable and link.resumable:
            hub.recovery.settle(existing)  # (a half-open link we had not seen drop)
            link.inherit(existing)
            resumed = True
        else:
            hub.drop_link(existing, orphan=existing.peer_epoch < epoch)
        existing.close()
    link.peer_node = node
    link.peer_epoch = epoch
    hub.link_up(node, link)
    if link.resumable:
        # Counted frames wait for the peer's RESUME; ours tells it where we are.
        link.resuming = True
        link.send(frames.resume(link.published_in))
        if link.confirmable and not link.ack_pending:  # confirm what the old link had
            link.ack_pending = link.ack_due = True
            if not link.reading:
                link.call_soon(link_dispatch.confirm, hub, link)
    if resumed:
        hub.recovery.resumed += 1
        log.warning("link to %s (epoch %d) re-established: resuming", node, epoch)
    else:
        log.info("link up: %s (epoch %d)", node, epoch)
    if link.snapshot_end:
        # until its SNAPSHOT_END: a resumed link's snapshot replaces the routes kept from
        # the old link; a new link's tells when this node knows the peer's routes
        # (``cluster.peer_routes``: a starting node accepts clients after that)
        link.announced = AnnouncedRoutes()
    hub.send_snapshot(link)
    if link.snapshot_end:
        link.send(frames.SNAPSHOT_END_FRAME)
    for client_id, message, qos, hold in hub.link_wait.take((node, epoch)):
        data = frames.direct(client_id, hub.encode(message, qos, False))
        link_ledger.send_direct(link, data, client_id, message, qos, hold)
        if hold is not None:
            hold.release()  # the link holds it now
