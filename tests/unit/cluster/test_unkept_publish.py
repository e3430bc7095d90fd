"""PUBLISH_UNKEPT (HELLO feature bit 32): a PUBLISH frame the sender does not keep asks for no
PUBLISH_ACK; the receiver counts it with the others, and the next PUBLISH_ACK it owes covers it."""

from __future__ import annotations

import asyncio

from tests.support.sink_link import connect_client
from tests.unit.cluster.test_held_forwarding import Transport
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_frames import FrameDecoder, Kind
from xmq.cluster.peer_link import PeerLink
from xmq.cluster.route_table import DurableSub
from xmq.codec.packets import Publish, Subscribe, SubscriptionRequest
from xmq.contract.message_record import encode_record
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.message import Message
from xmq.core.settings import CoreSettings

OLDER = frames.FEATURES & ~frames.FEATURE_UNKEPT_PUBLISH
"""The features of a node of the version before (it reads no PUBLISH_UNKEPT)."""


def _hub(node: str = "node-1", epoch: int = 3) -> ClusterHub:
    return ClusterHub(Broker(CoreSettings()), NodeIdentity(node, epoch, online=True), None)


def _linked(hub: ClusterHub, node: str, features: int = frames.FEATURES) -> PeerLink:
    link = PeerLink(hub)
    hub.link_hello(link, FrameDecoder().feed(frames.hello(node, 5, features))[0][1])
    hub.recovery.resume(link, 0)  # the peer has handled none of our frames
    link._out.clear()  # RESUME and the snapshot
    return link


def _kinds(link: PeerLink) -> list[int]:
    return [kind for kind, _ in FrameDecoder().feed(b"".join(link._out))]


def _message(payload: bytes, retain: bool = False) -> Message:
    return Message("t", payload, 1, retain, None, "pub", 0.0)


async def test_a_frame_not_kept_goes_as_publish_unkept_to_a_peer_that_reads_them() -> None:
    hub = _hub()
    new, old = _linked(hub, "node-2"), _linked(hub, "node-3", OLDER)
    hub.table.route("node-2", "t", True)
    hub.table.route("node-3", "t", True)
    assert hub.forward(_message(b"1")) == 2
    assert _kinds(new) == [Kind.PUBLISH_UNKEPT]
    assert _kinds(old) == [Kind.PUBLISH]  # an older node: as before
    assert not new.unconfirmed and not old.unconfirmed


async def test_a_kept_frame_asks_for_its_ack() -> None:
    hub = _hub()
    link = _linked(hub, "node-2")
    hub.table.route("node-2", "t", True)
    hub.table.durable_sub("node-2", "c1", DurableSub("t", "t", 1, 0), True)
    hub.forward(_message(b"1"))
    assert _kinds(link) == [Kind.PUBLISH]
    assert [entry[0] for entry in link.unconfirmed] == [1]


async def test_a_retained_message_to_a_node_without_its_route_goes_unkept() -> None:
    hub = _hub()
    link = _linked(hub, "node-2")
    hub.forward(_message(b"r", retain=True))
    assert _kinds(link) == [Kind.PUBLISH_UNKEPT]


async def test_frames_kept_while_resuming_are_sent_again_as_publish() -> None:
    hub = _hub()
    link = PeerLink(hub)
    hub.link_hello(link, FrameDecoder().feed(frames.hello("node-2", 5))[0][1])
    hub.table.route("node-2", "t", True)
    hub.forward(_message(b"1"))  # before the peer's RESUME: kept, not written
    assert Kind.PUBLISH_UNKEPT not in _kinds(link)
    link._out.clear()
    hub.recovery.resume(link, 0)
    assert _kinds(link) == [Kind.PUBLISH]  # in ``unconfirmed``: its PUBLISH_ACK releases it
    assert len(link.unconfirmed) == 1


def _frames(kind: int, count: int, start: int = 0) -> bytes:
    return b"".join(
        frames.publish(
            encode_record(f"node-1/3/f{n}", "t", b"%d" % n, 1, False, None, "p", 1, False),
            kind == Kind.PUBLISH,
        )
        for n in range(start, start + count)
    )


def _acks(link: PeerLink, transport: Transport) -> list[int]:
    sent = FrameDecoder().feed(b"".join([*transport.written, *link._out]))
    return [int.from_bytes(body, "big") for kind, body in sent if kind == Kind.PUBLISH_ACK]


async def test_the_receiver_counts_unkept_frames_and_confirms_them_with_the_next_ack() -> None:
    hub = _hub("node-2", 5)
    conn, sink = await connect_client(hub.broker, "sub")
    conn.handle(Subscribe(1, [SubscriptionRequest("t", 1)]))
    sink.packets()
    link = _linked(hub, "node-1")
    transport = Transport()
    link.transport = transport  # type: ignore[assignment]
    link.data_received(_frames(Kind.PUBLISH_UNKEPT, 3))
    for _ in range(3):
        await asyncio.sleep(0)
    delivered = [packet for packet in sink.packets() if isinstance(packet, Publish)]
    assert [packet.payload for packet in delivered] == [b"0", b"1", b"2"]
    assert (link.published_in, link.ack_pending, _acks(link, transport)) == (3, False, [])
    link.data_received(_frames(Kind.PUBLISH, 1, 3))  # a kept one: the ack covers all four
    for _ in range(3):
        await asyncio.sleep(0)
    assert _acks(link, transport) == [4]
