"""How a node link paces the frames it reads over loop turns.

A PUBLISH frame whose fan-out is routed over several loop turns (``core.fanout_slices``)
holds the link's later frames: the rest of the read waits, in order, with reading paused (as
a client's socket is), until its last slice; then they are handled on the next turn. Every
frame of the link keeps its place, so each session gets the link's messages in the order they
came, and PUBLISH_ACK counts (which confirm frames in order) stay exact. The frame is counted
as handled when it arrives (``published_in``: what a RESUME says, so a link resumed meanwhile
is not sent it again) and confirmed after its last slice (``confirmable``); a resumed link
inherits the fan-out in progress, waits behind it too and sends that confirmation. The cost is
head-of-line blocking on that one link — its other publishers' frames wait ~one loop turn per
1,024 deliveries of the fan-out ahead of them — while other links and clients are served
every turn. The heartbeat does not count the pause against the peer.

Frames that are not sliced (each reaching fewer than a slice of sessions) are bounded per loop
turn the same way: a read's frames are handled until they have routed ``SLICE`` deliveries or
``FRAMES_PER_TURN`` frames, or while the durable store has ``RECORDS_AHEAD`` records not yet
written; the rest wait behind, in order, reading paused, for the next turn (or, when the store
is behind, ``RECORDS_WAIT_S``). So a burst of frames from a peer costs a loop turn per slice of
work, and a peer sending faster than this node routes is held by TCP, not in memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from xmq.cluster.link_frames import FrameError, Kind
from xmq.core.fanout_slices import RECORDS_AHEAD, RECORDS_WAIT_S, SLICE

if TYPE_CHECKING:
    from xmq.cluster.peer_link import PeerLink

FRAMES_PER_TURN: Final = 512
"""Frames of a read handled in one loop turn at most (with at most ``SLICE`` deliveries)."""


def handle(link: PeerLink, frames: list[tuple[int, bytes]]) -> None:
    """Handle ``frames`` in order until one starts a fan-out over later loop turns (the
    rest wait behind it: ``fan_in``) or the turn's work is done (they wait for the next
    turn: ``PeerLink.defer``)."""
    hub = link.hub
    broker = hub.broker
    stats = broker.stats
    routed = stats.deliveries_routed
    last = len(frames) - 1
    for at, (kind, body) in enumerate(frames):
        if not link.peer_node:
            if kind != Kind.HELLO:
                raise FrameError("first frame must be HELLO")
            hub.link_hello(link, body)  # (a resumed link: behind an inherited fan-out)
            if link.closed:
                return
        else:
            hub.handle_frame(link, kind, body)
        if link.waiting_on_fanout:
            link.queue_behind(frames[at + 1 :])
            return
        if at < last and link.peer_node:
            store = broker.store
            if store is not None and store.unwritten >= RECORDS_AHEAD:
                link.defer(frames[at + 1 :], RECORDS_WAIT_S)
                return
            if at + 1 >= FRAMES_PER_TURN or stats.deliveries_routed - routed >= SLICE:
                link.defer(frames[at + 1 :], 0.0)
                return
