"""Self-fencing: reads past the lease deadline are held until the lease is proven again."""

from __future__ import annotations

import asyncio
import math
from typing import cast

from tests.support.recording_transport import RecordingTransport
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.peer_link import PeerLink
from xmq.codec.packets import MQTT_5, Connect
from xmq.codec.writer import encode
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.lease_fence import FENCE_MARGIN, LeaseFence
from xmq.core.settings import CoreSettings
from xmq.net.client_protocol import FlushScheduler, MqttClientProtocol


def test_the_deadline_is_the_renewal_start_plus_the_ttl_less_the_margin() -> None:
    fence = LeaseFence()
    assert fence.deadline == math.inf  # no cluster: never held
    fence.proven(100.0, 10.0)
    assert fence.deadline == 100.0 + 10.0 * (1 - FENCE_MARGIN)
    fence.expire()
    assert fence.deadline == -math.inf
    fence.lift()
    assert fence.deadline == math.inf


def test_held_reads_ask_once_for_a_renewal_and_resume_in_order() -> None:
    fence = LeaseFence()
    doubts: list[int] = []
    fence.watch(lambda: doubts.append(1))
    fence.expire()
    resumed: list[str] = []
    fence.hold(lambda: resumed.append("a"))
    fence.hold(lambda: resumed.append("b"))
    assert doubts == [1] and fence.waiting == 2 and not resumed
    fence.proven(5.0, 2.0)
    assert resumed == ["a", "b"] and fence.waiting == 0 and fence.holds == 2


async def _client(broker: Broker) -> tuple[MqttClientProtocol, RecordingTransport]:
    protocol = MqttClientProtocol(
        broker,
        AnonymousAuthenticator(),
        AllowAll(),
        FlushScheduler(asyncio.get_running_loop()),
        65536,
    )
    wire = RecordingTransport()
    protocol.connection_made(cast(asyncio.Transport, wire))
    return protocol, wire


async def _turns() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_client_read_past_the_deadline_acts_only_once_the_lease_is_proven() -> None:
    broker = Broker(CoreSettings())
    protocol, wire = await _client(broker)
    broker.fence.expire()  # a pause longer than the lease: nothing is known any more
    connect = encode(Connect(protocol_version=MQTT_5, client_id="c", clean_start=True), MQTT_5)
    protocol.data_received(connect[:5])
    protocol.data_received(connect[5:])
    await _turns()
    assert wire.sent == b"" and broker.fence.waiting == 1  # no CONNACK: held
    assert not wire.reading  # the rest stays in the kernel's buffers, not in this process
    broker.fence.proven(broker.now(), 10.0)
    await _turns()
    assert wire.sent[:1] == b"\x20"  # the CONNACK, from the held bytes in order
    assert wire.reading


async def test_held_client_bytes_are_dropped_when_the_node_went_offline() -> None:
    broker = Broker(CoreSettings())
    protocol, wire = await _client(broker)
    broker.fence.expire()
    protocol.data_received(
        encode(Connect(protocol_version=MQTT_5, client_id="c", clean_start=True), MQTT_5)
    )
    protocol.close()  # what going offline does to every connection
    broker.fence.lift()
    await _turns()
    assert wire.sent == b""


async def test_link_frames_past_the_deadline_are_held_until_the_lease_is_proven() -> None:
    broker = Broker(CoreSettings())
    hub = ClusterHub(broker, NodeIdentity("node-1", 3, online=True), None)
    link = PeerLink(hub)
    wire = RecordingTransport()
    link.connection_made(cast(asyncio.Transport, wire))
    broker.fence.expire()
    link.data_received(frames.hello("node-2", 7))
    assert link.peer_node == "" and "node-2" not in hub.links
    assert not wire.reading  # held frames: one read, the rest waits in the kernel's buffers
    broker.fence.proven(broker.now(), 10.0)
    assert hub.links["node-2"] is link and link.peer_epoch == 7
    assert wire.reading
