"""Link heartbeats (HELLO feature 4): PING each second, a silent link is aborted in seconds."""

from __future__ import annotations

import asyncio
from typing import cast

from tests.support.recording_transport import RecordingTransport
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_frames import FrameDecoder, Kind
from xmq.cluster.link_recovery import HEARTBEAT_TIMEOUT_S
from xmq.cluster.peer_link import PeerLink
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.settings import CoreSettings


async def _linked(features: int) -> tuple[ClusterHub, PeerLink, RecordingTransport]:
    broker = Broker(CoreSettings())
    hub = ClusterHub(broker, NodeIdentity("node-1", 3, online=True), None)
    link = PeerLink(hub)
    wire = RecordingTransport()
    link.connection_made(cast(asyncio.Transport, wire))
    link.data_received(frames.hello("node-2", 7, features))
    await asyncio.sleep(0)
    wire.sent.clear()
    return hub, link, wire


def _aborted(wire: RecordingTransport) -> bool:
    return wire.aborted


def _kinds(wire: RecordingTransport) -> list[int]:
    return [kind for kind, _ in FrameDecoder().feed(bytes(wire.sent))]


async def test_a_heard_link_gets_a_ping_and_a_silent_one_is_aborted() -> None:
    hub, link, wire = await _linked(frames.FEATURES)
    assert link.heartbeat
    now = hub.broker.now()
    hub.recovery.heartbeat_tick(now + 1.0)
    await asyncio.sleep(0)
    assert _kinds(wire) == [Kind.PING] and not wire.aborted
    link.data_received(frames.PING_FRAME)  # heard: the clock of its silence starts again
    heard = link.last_heard
    hub.recovery.heartbeat_tick(heard + HEARTBEAT_TIMEOUT_S - 0.1)
    assert hub.recovery.heartbeat_timeouts == 0
    hub.recovery.heartbeat_tick(heard + HEARTBEAT_TIMEOUT_S + 0.1)
    assert hub.recovery.heartbeat_timeouts == 1
    assert _aborted(wire)


async def test_a_node_that_cannot_prove_its_lease_blames_no_peer() -> None:
    hub, link, wire = await _linked(frames.FEATURES)
    hub.broker.fence.expire()  # this node was paused: the silence was its own
    hub.recovery.heartbeat_tick(link.last_heard + 60)
    assert not wire.aborted


async def test_a_peer_without_the_feature_gets_no_ping() -> None:
    hub, link, wire = await _linked(frames.FEATURE_SHARED_COUNTED)
    assert not link.heartbeat and not link.resumable
    hub.recovery.heartbeat_tick(link.last_heard + 60)
    await asyncio.sleep(0)
    assert _kinds(wire) == [] and not wire.aborted
