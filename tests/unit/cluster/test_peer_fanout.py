"""A PUBLISH frame from another node matching more than a slice of local sessions is routed a
slice per loop turn (``core.fanout_slices``): its PUBLISH_ACK (with its quota outcome) waits
for the last slice, the link's later frames wait behind it in order, and the forward id
reaches the records of every slice.

The broker's loop is a ``VirtualLoop`` (the slices and the link's resume run on its turns);
the link's confirmation and writes use the test's running loop, stepped with ``_settle``."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from tests.support.recording_transport import RecordingTransport
from tests.support.virtual_broker import parked_sessions
from tests.support.virtual_loop import VirtualLoop
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_frames import BodyReader, FrameDecoder, Kind
from xmq.cluster.link_recovery import HEARTBEAT_TIMEOUT_S
from xmq.cluster.peer_link import PeerLink
from xmq.core.broker import Broker
from xmq.core.cluster_ports import DurableContext, NodeIdentity
from xmq.core.fanout_slices import SLICE
from xmq.core.message import Message
from xmq.core.node_caps import set_store
from xmq.core.session import Delivery, QueueLimits, Session, Subscription
from xmq.core.settings import CoreSettings

SESSIONS = 3 * SLICE + 1


class ContextRecorder:
    """A durable store that records the context each record was given (and nothing else)."""

    def __init__(self) -> None:
        self.contexts: list[tuple[str, DurableContext]] = []

    def record(
        self, session: Session, delivery: Delivery, now: float, context: DurableContext
    ) -> bool:
        self.contexts.append((session.client_id, context))
        return True


def _broker(max_messages: int = 100) -> tuple[Broker, VirtualLoop]:
    """``SESSIONS`` offline persistent sessions on ``bcast/#``; ``s0`` on ``solo`` too."""
    queues = QueueLimits(max_messages, 10_000_000, 1 << 30, 10)
    broker, loop = parked_sessions(SESSIONS, "bcast/#", 1, queues)
    first = broker.sessions["s0"]
    broker.subscribe(first, Subscription(first, "solo", 1))
    return broker, loop


async def _linked(broker: Broker) -> tuple[ClusterHub, PeerLink, RecordingTransport]:
    hub = ClusterHub(broker, NodeIdentity("node-1", 3, online=True), None)
    link = PeerLink(hub)
    wire = RecordingTransport()
    link.connection_made(cast(asyncio.Transport, wire))
    link.data_received(frames.hello("node-2", 7, frames.FEATURES))
    hub.recovery.resume(link, 0)  # the peer has handled none of our frames
    await _settle()
    wire.sent.clear()
    return hub, link, wire


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _publish(peer: ClusterHub, topic: str, payload: bytes) -> bytes:
    """A PUBLISH frame as node-2 sends it (with its forward id)."""
    return frames.publish(peer.encode(Message(topic, payload, 1, False, None, "p", 0.0), 1, False))


def _acks(wire: RecordingTransport) -> list[tuple[int, dict[int, int] | None]]:
    sent = FrameDecoder().feed(bytes(wire.sent))
    return [frames.read_publish_ack(BodyReader(b)) for kind, b in sent if kind == Kind.PUBLISH_ACK]


def _held(link: PeerLink) -> bool:
    """The link's reads wait behind a fan-out from it (a call: mypy narrows no property)."""
    return link.waiting_on_fanout


def _payloads(session: Session) -> list[bytes]:
    return [delivery.message.payload for delivery in session.queue]


def _peer(broker: Broker) -> ClusterHub:
    """The sending node's hub: only its ``encode`` is used (node-2's forward ids)."""
    return ClusterHub(broker, NodeIdentity("node-2", 7, online=True), None)


async def test_a_peer_fan_out_is_routed_over_turns_and_confirmed_after_its_last_slice() -> None:
    broker, loop = _broker()
    hub, link, wire = await _linked(broker)
    peer = _peer(broker)
    # one read: the fan-out, then a frame for one of its sessions, then another fan-out
    read = _publish(peer, "bcast/x", b"1") + _publish(peer, "solo", b"2")
    link.data_received(read + _publish(peer, "bcast/y", b"3"))
    assert broker.stats.deliveries_routed == 0  # nothing in the turn that read it
    assert _held(link) and link.published_in == 1  # handled (a RESUME would count it) ...
    assert link.confirmable == 0  # ... not confirmable before its last slice
    per_turn: list[int] = []
    counted: list[int] = []  # frames confirmable by the PUBLISH_ACK after each turn
    acks_per_turn: list[list[tuple[int, dict[int, int] | None]]] = []
    while loop.pending():
        before = broker.stats.deliveries_routed
        loop.run_turn()
        await _settle()  # the link's confirmation, if any is due, goes out
        per_turn.append(broker.stats.deliveries_routed - before)
        counted.append(link.confirmable)
        acks_per_turn.append(_acks(wire))
        wire.sent.clear()
    assert max(per_turn) <= SLICE
    assert sum(per_turn) == 2 * SESSIONS + 1
    first_done = counted.index(1)  # the turn of the first fan-out's last slice
    assert first_done >= 3  # several turns
    assert sum(per_turn[: first_done + 1]) == SESSIONS
    # no confirmation before the first fan-out's last slice, then one covering it alone
    assert all(acks == [] for acks in acks_per_turn[:first_done])
    assert acks_per_turn[first_done] == [(1, None)]
    # the frame behind it went on the next turn (and the third fan-out after that)
    assert counted[first_done + 1] == 2 and acks_per_turn[first_done + 1] == [(2, None)]
    assert [acks for acks in acks_per_turn if acks][-1] == [(3, None)]
    assert link.published_in == 3 and not _held(link)
    assert _payloads(broker.sessions["s0"]) == [b"1", b"2", b"3"]  # the link's order
    assert _payloads(broker.sessions[f"s{SESSIONS - 1}"]) == [b"1", b"3"]


async def test_a_peer_fan_out_dropped_everywhere_for_a_quota_says_so_after_its_last_slice() -> None:
    broker, loop = _broker(max_messages=0)  # every queue is full
    hub, link, wire = await _linked(broker)
    link.data_received(_publish(_peer(broker), "bcast/x", b"1"))
    turns = 0
    while not wire.sent:  # nothing is confirmed before the last slice
        assert link.confirmable == 0
        loop.run_turn()
        await _settle()
        turns += 1
    assert turns >= 4 and broker.stats.deliveries_routed == SESSIONS
    assert _acks(wire) == [(1, {1: 0x97})]  # as the whole routing said: delivered nowhere
    assert broker.stats.dropped_by_reason == {"queue_full": SESSIONS}


async def test_the_forward_id_reaches_the_records_of_every_slice() -> None:
    broker, loop = _broker()
    recorder = ContextRecorder()
    for session in broker.sessions.values():
        set_store(broker, session, recorder)  # type: ignore[arg-type]
    hub, link, wire = await _linked(broker)
    peer = _peer(broker)
    message = Message("bcast/x", b"1", 1, False, None, "p", 0.0)
    link.data_received(frames.publish(peer.encode(message, 1, False)))
    recorded_per_turn = [len(recorder.contexts)]
    while loop.pending():
        loop.run_turn()
        recorded_per_turn.append(len(recorder.contexts) - sum(recorded_per_turn))
    await _settle()
    assert recorded_per_turn[0] == 0 and max(recorded_per_turn) <= SLICE  # in slices
    assert sorted(client_id for client_id, _ in recorder.contexts) == sorted(broker.sessions)
    assert {context.forward_id for _, context in recorder.contexts} == {message.forward_id}
    assert message.forward_id.startswith("node-2/7/")
    assert _acks(wire) == [(1, None)]


async def test_the_silence_of_a_link_held_behind_its_fan_out_is_not_the_peers() -> None:
    broker, loop = _broker()
    hub, link, wire = await _linked(broker)
    link.data_received(_publish(_peer(broker), "bcast/x", b"1"))
    assert _held(link)
    hub.recovery.heartbeat_tick(link.last_heard + HEARTBEAT_TIMEOUT_S + 1)
    assert not wire.aborted and hub.recovery.heartbeat_timeouts == 0
    while loop.pending():
        loop.run_turn()
    assert not _held(link)
    hub.recovery.heartbeat_tick(link.last_heard + HEARTBEAT_TIMEOUT_S + 1)
    assert wire.aborted  # reading again: a silent peer is


async def test_a_direct_frame_behind_a_fan_out_reaches_its_session_after_it() -> None:
    broker, loop = _broker()
    hub, link, wire = await _linked(broker)
    peer = _peer(broker)
    direct = frames.direct(
        "s0", peer.encode(Message("own", b"d", 1, False, None, "p", 0.0), 1, False)
    )
    link.data_received(_publish(peer, "bcast/x", b"1") + direct)
    assert _payloads(broker.sessions["s0"]) == []  # the DIRECT frame waits too
    while loop.pending():
        loop.run_turn()
    await _settle()
    assert _payloads(broker.sessions["s0"]) == [b"1", b"d"]
    assert _acks(wire)[-1] == (2, None)


class HeldAck:
    """A publisher's held ack on the sending node: ``acks`` counts the times its last hold
    was released (the PUBACK going out); a release too many fails the test."""

    def __init__(self) -> None:
        self.pending = 1  # the routing's own, released once routing is over
        self.acks = 0

    def hold(self) -> None:
        self.pending += 1

    def release(self) -> None:
        self.pending -= 1
        assert self.pending >= 0, "released once too often"
        if self.pending == 0:
            self.acks += 1

    def fail(self) -> None:
        raise AssertionError("no write fails here")

    def undelivered(self, reason: int) -> None:
        raise AssertionError(f"delivered here: not {reason:#x}")


Side = tuple[PeerLink, RecordingTransport]


def _connect(hub: ClusterHub) -> Side:
    link = PeerLink(hub)
    wire = RecordingTransport()
    link.connection_made(cast(asyncio.Transport, wire))  # its HELLO goes out
    return link, wire


async def _carry(here: Side, there: Side) -> None:
    """Carry what each end wrote to the other, until both are quiet."""
    for _ in range(20):
        await _settle()
        to_there, to_here = bytes(here[1].sent), bytes(there[1].sent)
        here[1].sent.clear()
        there[1].sent.clear()
        if not to_there and not to_here:
            return
        if to_there:
            there[0].data_received(to_there)
        if to_here:
            here[0].data_received(to_here)
    raise AssertionError("the ends never went quiet")


def _drop(*sides: Side) -> None:
    """The connection resets under both ends (both runs live: suspended, not orphaned)."""
    for link, wire in sides:
        wire.closed = True
        link.connection_lost(ConnectionResetError())
        assert link.hub.links[link.peer_node] is link and link.resuming
        for task in list(link.hub._tasks):
            task.cancel()  # its re-dial: the test links the ends again itself


def _announced(hub: ClusterHub) -> ContextRecorder:
    """``s0`` is persistent (its deliveries go to the returned store): node-1 announces
    ``bcast/#`` and its subscription to node-2, whose frames to node-1 are then kept until
    confirmed, with the publisher's held ack."""
    first = hub.broker.sessions["s0"]
    recorder = ContextRecorder()
    set_store(hub.broker, first, recorder)  # type: ignore[arg-type]
    hub.subscription_changed(first, first.subscriptions["bcast/#"], True)
    return recorder


@pytest.mark.parametrize("done_while_down", [False, True])
async def test_a_link_resumed_during_a_peer_fan_out_delivers_it_once_and_confirms_it_once(
    done_while_down: bool,
) -> None:
    """The link drops after the fan-out's first slice and is resumed while the rest goes
    on (or after it ended): the RESUME covers the frame in progress, so it is not sent again,
    and the PUBLISH_ACK that releases the publisher's held ack follows its last slice, on
    the new link."""
    broker, loop = _broker()
    receiver = ClusterHub(broker, NodeIdentity("node-1", 3, online=True), None)
    recorder = _announced(receiver)
    origin = ClusterHub(Broker(CoreSettings()), NodeIdentity("node-2", 7, online=True), None)
    for hub in (receiver, origin):
        hub.peer_alive = lambda node, epoch: True
    here, there = _connect(receiver), _connect(origin)
    await _carry(here, there)
    held = HeldAck()
    origin.forward(Message("bcast/x", b"1", 1, False, None, "p", 0.0), held)
    held.release()  # routing is over on node-2: the frame's hold is left
    await _carry(here, there)
    loop.run_turn()
    assert 0 < broker.stats.deliveries_routed < SESSIONS  # a slice of it, then the link drops
    _drop(here, there)
    if done_while_down:
        while loop.pending():
            loop.run_turn()
        await _settle()
    here, there = _connect(receiver), _connect(origin)
    await _carry(here, there)
    assert receiver.links["node-2"] is here[0] and origin.links["node-1"] is there[0]
    assert receiver.recovery.resumed == origin.recovery.resumed == 1
    while loop.pending():
        loop.run_turn()
        await _carry(here, there)
        if held.acks:  # not before the last slice, and it was routed once
            assert broker.stats.deliveries_routed == SESSIONS
    assert broker.stats.deliveries_routed == SESSIONS
    assert held.acks == 1 and held.pending == 0
    assert not there[0].unconfirmed
    # the new link reads on: a later message arrives once and is confirmed
    later = HeldAck()
    origin.forward(Message("bcast/y", b"2", 1, False, None, "p", 0.0), later)
    later.release()
    await _carry(here, there)
    while loop.pending():
        loop.run_turn()
        await _carry(here, there)
    assert later.acks == 1 and not _held(here[0])
    others = [tuple(_payloads(session)) for session in broker.sessions.values()]
    assert others.count((b"1", b"2")) == SESSIONS - 1  # every session once each, s0 recorded:
    assert (
        len({context.forward_id for _, context in recorder.contexts}) == 2 == len(recorder.contexts)
    )


async def test_a_fan_out_from_a_link_given_up_confirms_nothing_and_holds_no_later_link() -> None:
    """A link that is not resumed (its peer run treated as dead) drops during a fan-out from
    it: the fan-out ends (each session once), nothing is confirmed for it, and the link of
    the peer's next run, with a fan-out of its own behind it, waits for its own only."""
    broker, loop = _broker()
    hub, link, wire = await _linked(broker)  # node-2's run 7 (peer_alive: no)
    link.data_received(_publish(_peer(broker), "bcast/x", b"1"))
    loop.run_turn()
    link.connection_lost(ConnectionResetError())  # not resumable: dropped at once
    assert "node-2" not in hub.links
    wire.sent.clear()
    later = PeerLink(hub)
    later_wire = RecordingTransport()
    later.connection_made(cast(asyncio.Transport, later_wire))
    later.data_received(frames.hello("node-2", 8, frames.FEATURES) + frames.resume(0))
    await _settle()
    later_wire.sent.clear()
    run_8 = ClusterHub(broker, NodeIdentity("node-2", 8, online=True), None)
    later.data_received(_publish(run_8, "bcast/y", b"2"))  # fans out after the first one
    last = broker.sessions[f"s{SESSIONS - 1}"]
    first_done = False
    while loop.pending():
        loop.run_turn()
        await _settle()
        if _payloads(last) == [b"1"]:  # the given-up link's fan-out is over, not the next
            first_done = True
            assert _held(later) and later.confirmable == 0 and _acks(later_wire) == []
    assert first_done and not _held(later)
    assert _acks(later_wire) == [(1, None)] and wire.sent == bytearray()
    assert {tuple(_payloads(s)) for n, s in broker.sessions.items() if n != "s0"} == {(b"1", b"2")}
