"""A node link's work per loop turn and its write buffer are bounded (``PeerLink``): frames
too small to be sliced still go a slice of deliveries (or ``FRAMES_PER_TURN`` frames) per
turn, in order, reading paused meanwhile, and confirmed once handled; above the write
buffer's high-water mark the local publishers whose messages go over the link are paused.

The broker's loop is a ``VirtualLoop``; the link's confirmation and writes use the test's
running loop, stepped with ``_settle`` (as in ``test_peer_fanout``)."""

from __future__ import annotations

import asyncio
from typing import cast

from tests.support.recording_transport import RecordingTransport
from tests.support.virtual_broker import parked_sessions
from tests.support.virtual_loop import VirtualLoop
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_backpressure import WRITE_HIGH
from xmq.cluster.link_frames import BodyReader, FrameDecoder, Kind
from xmq.cluster.link_pacing import FRAMES_PER_TURN
from xmq.cluster.peer_link import PeerLink
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.connection import ClientConnection
from xmq.core.fanout_slices import SLICE
from xmq.core.message import Message
from xmq.core.ports import ClientLink
from xmq.core.session import QueueLimits, Session, Subscription

WIDE = 300  # sessions per frame: under a slice, so a frame is routed whole


class _PausingTransport(RecordingTransport):
    def __init__(self) -> None:
        super().__init__()
        self.paused = False
        self.pauses = 0

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False


def _broker() -> tuple[Broker, VirtualLoop]:
    queues = QueueLimits(10_000, 100_000_000, 1 << 30, 10)
    broker, loop = parked_sessions(WIDE, "bcast/#", 1, queues)
    first = broker.sessions["s0"]
    broker.subscribe(first, Subscription(first, "solo", 1))
    return broker, loop


async def _linked(broker: Broker) -> tuple[ClusterHub, PeerLink, _PausingTransport]:
    hub = ClusterHub(broker, NodeIdentity("node-1", 3, online=True), None)
    link = PeerLink(hub)
    wire = _PausingTransport()
    link.connection_made(cast(asyncio.Transport, wire))
    link.data_received(frames.hello("node-2", 7, frames.FEATURES))
    hub.recovery.resume(link, 0)
    await _settle()
    wire.sent.clear()
    return hub, link, wire


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _publish(peer: ClusterHub, topic: str, payload: bytes) -> bytes:
    return frames.publish(peer.encode(Message(topic, payload, 1, False, None, "p", 0.0), 1, False))


def _confirmed(wire: RecordingTransport) -> int:
    sent = FrameDecoder().feed(bytes(wire.sent))
    acks = [frames.read_publish_ack(BodyReader(b)) for kind, b in sent if kind == Kind.PUBLISH_ACK]
    return max((count for count, _ in acks), default=0)


def _paused(transport: _PausingTransport | _ClientLink) -> bool:
    """(calls: mypy narrows no attribute across the calls that change it)"""
    return transport.paused


def _held(link: PeerLink) -> bool:
    return link.waiting_on_fanout


def _congested(link: PeerLink) -> bool:
    return link.congested


async def _turns(loop: VirtualLoop, broker: Broker, link: PeerLink) -> list[int]:
    """Run the broker's turns until the link has handled everything; deliveries per turn."""
    per_turn = []
    while loop.pending():
        before = broker.stats.deliveries_routed
        loop.advance(0.001)
        loop.run_turn()
        await _settle()
        per_turn.append(broker.stats.deliveries_routed - before)
    return per_turn


async def test_a_burst_of_unsliced_frames_goes_a_slice_per_turn_in_order() -> None:
    broker, loop = _broker()
    hub, link, wire = await _linked(broker)
    peer = ClusterHub(broker, NodeIdentity("node-2", 7, online=True), None)
    count = 40  # 12,000 deliveries in one read
    link.data_received(b"".join(_publish(peer, "bcast/x", b"%d" % n) for n in range(count)))
    first_turn = broker.stats.deliveries_routed
    assert first_turn <= SLICE + WIDE  # not the whole read in the turn that read it
    assert wire.paused and link.waiting_on_fanout  # the rest waits, reading paused
    await _settle()
    assert _confirmed(wire) == link.published_in < count  # only what was handled
    per_turn = [first_turn, *await _turns(loop, broker, link)]
    assert max(per_turn) <= SLICE + WIDE and sum(per_turn) == count * WIDE
    assert len([n for n in per_turn if n]) >= count * WIDE // (SLICE + WIDE)
    assert not _paused(wire) and not _held(link)
    assert link.published_in == count and _confirmed(wire) == count  # nothing lost
    expected = [b"%d" % n for n in range(count)]
    for session in broker.sessions.values():
        assert [d.message.payload for d in session.queue] == expected  # the link's order


async def test_many_small_frames_go_frames_per_turn() -> None:
    broker, loop = _broker()
    hub, link, wire = await _linked(broker)
    peer = ClusterHub(broker, NodeIdentity("node-2", 7, online=True), None)
    count = 3 * FRAMES_PER_TURN
    link.data_received(b"".join(_publish(peer, "solo", b"%d" % n) for n in range(count)))
    assert broker.stats.deliveries_routed == FRAMES_PER_TURN
    per_turn = [FRAMES_PER_TURN, *await _turns(loop, broker, link)]
    assert max(per_turn) == FRAMES_PER_TURN and sum(per_turn) == count
    assert [d.message.payload for d in broker.sessions["s0"].queue][-1] == b"%d" % (count - 1)
    assert _confirmed(wire) == count


class _ClientLink(ClientLink):
    def __init__(self) -> None:
        self.paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


class _Client:
    """A publisher's connection over a link that only records pauses (a real
    ``ClientConnection``: the session's client is a compiled class, ``core.session_client``)."""

    def __init__(self, broker: Broker) -> None:
        self.link = _ClientLink()
        self.conn = ClientConnection(broker, self.link, AnonymousAuthenticator(), AllowAll())


async def test_a_congested_link_pauses_the_publishers_it_forwards_for() -> None:
    broker, _loop = _broker()
    hub, link, wire = await _linked(broker)
    publisher, bystander = _Client(broker), _Client(broker)
    for client_id, client in (("pub", publisher), ("other", bystander)):
        session = Session(client_id, broker.settings.queues, broker.stats)
        session.connection = client.conn
        broker.sessions[client_id] = session
    message = Message("bcast/x", b"m", 1, False, None, "pub", 0.0)
    link.send_publish(b"frame", message, keep=False)
    assert not _congested(link) and not _paused(publisher.link)  # under the high-water mark
    link.pause_writing()  # the transport's buffer went over it
    link.send_publish(b"frame", message, keep=False)
    assert _congested(link) and _paused(publisher.link) and not _paused(bystander.link)
    publisher.link.resume_reading()  # resumed by another pauser (the store) meanwhile
    link.send_publish(b"frame", message, keep=False)
    assert _paused(publisher.link)  # its next message over the congested link pauses it again
    link.resume_writing()  # drained below the low-water mark
    assert not _congested(link) and not _paused(publisher.link)
    link.pause_writing()
    link.send_publish(b"frame", message, keep=False)
    link.connection_lost(None)  # a link gone resumes them too
    assert not _paused(publisher.link)


class _SocketBuffer(_PausingTransport):
    """A transport whose socket takes ``takes`` bytes a write at most; the rest waits in its
    buffer, and above the high-water mark it pauses its protocol (as asyncio's and uvloop's
    transports do, synchronously in the write)."""

    def __init__(self, takes: int) -> None:
        super().__init__()
        self.takes = takes
        self.buffered = 0
        self.link: PeerLink | None = None

    def writelines(self, lines: list[bytes]) -> None:
        size = sum(len(line) for line in lines)
        self.buffered += max(0, size - self.takes)
        if self.buffered > WRITE_HIGH and self.link is not None:
            self.link.pause_writing()

    def get_write_buffer_size(self) -> int:
        return self.buffered


async def _link_with_publisher(wire: _SocketBuffer) -> tuple[PeerLink, _Client, Message]:
    """A link writing into ``wire`` (its HELLO sent), a connected publisher ``pub`` and a
    message of it to forward."""
    broker, _loop = _broker()
    hub = ClusterHub(broker, NodeIdentity("node-1", 3, online=True), None)
    link = PeerLink(hub)
    link.connection_made(cast(asyncio.Transport, wire))
    await _settle()
    wire.link = link
    publisher = _Client(broker)
    session = Session("pub", broker.settings.queues, broker.stats)
    session.connection = publisher.conn
    broker.sessions["pub"] = session
    return link, publisher, Message("bcast/x", b"m", 1, False, None, "pub", 0.0)


async def _turn_past_the_mark(takes: int) -> tuple[PeerLink, _Client, list[bool]]:
    """One loop turn forwards 2 MiB for a publisher (64 KiB frames), as when libuv reads its
    socket many times in one wake-up; then the link's write (``_flush``) runs."""
    link, publisher, message = await _link_with_publisher(_SocketBuffer(takes))
    paused_in_turn = []
    for _ in range(32):
        link.send_publish(b"f" * (64 << 10), message, keep=False)
        paused_in_turn.append(_paused(publisher.link))
    await _settle()
    return link, publisher, paused_in_turn


async def test_a_turn_past_the_high_water_mark_pauses_its_publishers_before_the_write() -> None:
    # a stalled peer: the socket takes nothing, the transport pauses the link at the write
    link, publisher, paused_in_turn = await _turn_past_the_mark(takes=0)
    # paused as soon as the turn's frames pass 1 MiB (17 x 64 KiB), not after the 2 MiB
    # were written: before, the whole turn (libuv: up to 32 reads of 256 KiB a publisher)
    # was forwarded first (6-23 MiB buffered in tests/integration/cluster/test_link_pause.py)
    assert paused_in_turn.index(True) <= WRITE_HIGH // (64 << 10) + 1
    assert _congested(link) and _paused(publisher.link)  # and still, the buffer is full
    link.resume_writing()  # drained under the low-water mark
    assert not _paused(publisher.link)


async def test_a_turn_past_the_mark_that_the_socket_takes_resumes_them_after_the_write() -> None:
    link, publisher, paused_in_turn = await _turn_past_the_mark(takes=1 << 30)
    assert any(paused_in_turn)  # congested for the turn ...
    assert not _congested(link) and not _paused(publisher.link)  # ... and it all went out


class _MeasuredBuffer(_SocketBuffer):
    """A ``_SocketBuffer`` that counts how often its size is asked (a generic method call
    into the transport per ask) and drains when told (the socket took it meanwhile)."""

    def __init__(self, takes: int) -> None:
        super().__init__(takes)
        self.measures = 0

    def get_write_buffer_size(self) -> int:
        self.measures += 1
        return self.buffered


async def _publisher_link(takes: int) -> tuple[PeerLink, _MeasuredBuffer, _Client, Message]:
    wire = _MeasuredBuffer(takes)
    link, publisher, message = await _link_with_publisher(wire)
    wire.buffered = 0  # (its HELLO went out)
    return link, wire, publisher, message


async def test_the_room_is_measured_once_its_bound_runs_low_not_at_every_write() -> None:
    link, wire, publisher, message = await _publisher_link(takes=1 << 30)
    for _ in range(255):  # 255 turns of one 2 KiB frame: under half the mark in all
        link.send_publish(b"f" * 2048, message, keep=False)
        await _settle()
    assert wire.measures == 0  # no write asked the buffer's size
    for _ in range(2):
        link.send_publish(b"f" * 2048, message, keep=False)
        await _settle()
    assert wire.measures == 1  # past half the mark written since: measured (empty) once
    for _ in range(255):
        link.send_publish(b"f" * 2048, message, keep=False)
        await _settle()
    assert wire.measures == 1 and not _congested(link) and not _paused(publisher.link)


async def test_a_bound_run_out_is_measured_before_it_congests_the_link() -> None:
    # a socket that takes everything in time: 40 turns of 64 KiB (2.5 MiB, more than the
    # bound's 1 MiB) never congest the link, each send that ran the bound out measured it
    link, wire, publisher, message = await _publisher_link(takes=0)
    for _ in range(40):
        link.send_publish(b"f" * (64 << 10), message, keep=False)
        assert not _congested(link) and not _paused(publisher.link)
        await _settle()
        wire.buffered = 0  # the socket took it before the next turn
    assert wire.measures < 40


async def test_a_turn_that_takes_the_buffer_as_it_is_past_the_mark_congests_at_that_frame() -> None:
    # a stalled peer: 768 KiB stay buffered; the next turn's fifth 64 KiB frame would take
    # the buffer past 1 MiB: that send congests the link (its publisher paused by the next)
    link, wire, publisher, message = await _publisher_link(takes=0)
    for _ in range(12):
        link.send_publish(b"f" * (64 << 10), message, keep=False)
        await _settle()
    assert wire.buffered == 12 * (64 << 10) and not _congested(link)
    congested_in_turn = []
    for _ in range(6):
        link.send_publish(b"f" * (64 << 10), message, keep=False)
        congested_in_turn.append(_congested(link))
    assert congested_in_turn == [False] * 4 + [True] * 2
    assert _paused(publisher.link)  # by its next frame over the congested link
    await _settle()
    assert _congested(link) and _paused(publisher.link)  # the transport paused it: full
