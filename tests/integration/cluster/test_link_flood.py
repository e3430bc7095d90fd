"""A node link flooded over a real socket: a peer (the link protocol spoken by hand over TCP)
sends a burst of PUBLISH frames, each to 100 persistent sessions of this node — each too
small to be sliced, 240,000 deliveries in all. The node routes them a slice per loop turn
with reading paused between turns (the burst waits in TCP, not in memory), confirms every
frame, and each session gets every message in the link's order."""

from __future__ import annotations

import asyncio
import time

import pytest

from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_frames import BodyReader, FrameDecoder, Kind
from xmq.cluster.link_pacing import FRAMES_PER_TURN
from xmq.cluster.peer_link import PeerLink
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.fanout_slices import SLICE
from xmq.core.message import Message
from xmq.core.session import QueueLimits, Session, Subscription
from xmq.core.settings import CoreSettings

pytestmark = pytest.mark.integration

WIDE = 100
FRAMES = 2400


def _broker() -> Broker:
    queues = QueueLimits(10 * FRAMES, 1 << 40, 1 << 40, 10)
    broker = Broker(CoreSettings(queues=queues))
    for n in range(WIDE):
        session = Session(f"s{n}", broker.settings.queues, broker.stats, expiry_s=600)
        broker.sessions[session.client_id] = session
        broker.subscribe(session, Subscription(session, "bcast/#", 1))
    return broker


class _Ticks:
    """Samples once per loop iteration: deliveries routed since the last one, the wall time
    since it, and how many frames wait behind on the link."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.link: PeerLink | None = None
        self.max_routed = 0
        self.max_gap = 0.0
        self.max_behind = 0
        self.iterations = 0
        self._routed = 0
        self._at = time.perf_counter()
        self.running = True
        asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        now = time.perf_counter()
        routed = self.broker.stats.deliveries_routed
        self.max_routed = max(self.max_routed, routed - self._routed)
        self.max_gap = max(self.max_gap, now - self._at)
        link = self.link
        behind = link._behind if link is not None else None
        self.max_behind = max(self.max_behind, len(behind) if behind else 0)
        self._routed, self._at = routed, now
        self.iterations += 1
        if self.running:
            asyncio.get_running_loop().call_soon(self._tick)


async def test_a_flooded_link_is_handled_a_slice_per_turn_and_loses_nothing() -> None:
    broker = _broker()
    hub = ClusterHub(broker, NodeIdentity("node-1", 3, online=True), None)
    links: list[PeerLink] = []

    def accepted() -> PeerLink:
        link = PeerLink(hub)
        links.append(link)
        return link

    server = await asyncio.get_running_loop().create_server(accepted, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    ticks = _Ticks(broker)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    peer = ClusterHub(broker, NodeIdentity("node-2", 7, online=True), None)  # its encoder
    burst = [
        frames.publish(
            peer.encode(Message("bcast/x", b"%d" % n, 1, False, None, "p", 0.0), 1, False)
        )
        for n in range(FRAMES)
    ]
    writer.write(frames.hello("node-2", 7, frames.FEATURES) + frames.resume(0))
    writer.write(b"".join(burst))  # 2,400 frames, 240,000 deliveries, at once
    await writer.drain()
    ticks.link = links[0] if links else None
    decoder = FrameDecoder()
    confirmed = 0
    deadline = time.monotonic() + 60
    while confirmed < FRAMES and time.monotonic() < deadline:
        data = await asyncio.wait_for(reader.read(1 << 16), 30)
        assert data, "the node closed the link"
        for kind, body in decoder.feed(data):
            if kind == Kind.PUBLISH_ACK:
                count, undelivered = frames.read_publish_ack(BodyReader(body))
                assert undelivered is None
                confirmed = max(confirmed, count)
        if ticks.link is None and links:
            ticks.link = links[0]
    ticks.running = False
    writer.close()
    server.close()
    assert confirmed == FRAMES  # every frame confirmed ...
    assert broker.stats.deliveries_routed == FRAMES * WIDE
    expected = [b"%d" % n for n in range(FRAMES)]
    for session in broker.sessions.values():  # ... and in every session, in order
        assert [d.message.payload for d in session.queue] == expected
    # bounded work per loop iteration: a slice (and the frame that crossed it), never the
    # read's 65,536 bytes of frames at once
    assert ticks.max_routed <= SLICE + WIDE, ticks.max_routed
    assert ticks.max_behind < 256 * 1024 // len(burst[0])  # at most one read waits
    assert ticks.iterations > FRAMES * WIDE // (SLICE + WIDE)
    print(
        f"\n{FRAMES} frames x {WIDE}: max {ticks.max_routed} deliveries and "
        f"{ticks.max_gap * 1000:.1f} ms per loop iteration, max {ticks.max_behind} frames "
        f"waiting (FRAMES_PER_TURN {FRAMES_PER_TURN}), {ticks.iterations} iterations"
    )
