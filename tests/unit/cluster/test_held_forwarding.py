"""The links' side of held publisher acks: released per PUBLISH_ACK, or after the appends
that replace a dead node's records."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.append_recorder import AppendRecorder
from xmq.cluster import link_frames as frames
from xmq.cluster import link_ledger
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_frames import BodyReader, FrameDecoder, Kind
from xmq.cluster.peer_link import PeerLink
from xmq.cluster.route_table import DurableSub
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.message import Message
from xmq.core.settings import CoreSettings


class Hold:
    """A held ack: counts holds; ``acked`` once the last one is released."""

    def __init__(self) -> None:
        self.pending = 1
        self.acked = False
        self.reasons: list[int] = []  # from ``undelivered``

    def hold(self) -> None:
        assert not self.acked
        self.pending += 1

    def release(self) -> None:
        self.pending -= 1
        assert self.pending >= 0
        if self.pending == 0:
            self.acked = True

    def fail(self) -> None:
        raise AssertionError("no write fails here")

    def undelivered(self, reason: int) -> None:
        self.reasons.append(reason)
        self.release()

    def routed(self) -> Hold:
        self.release()  # what the core does when routing is over
        return self


def _message(payload: bytes, topic: str = "t") -> Message:
    return Message(topic, payload, 1, False, None, "pub", 0.0)


def _hub() -> tuple[ClusterHub, AppendRecorder]:
    store = AppendRecorder()
    hub = ClusterHub(Broker(CoreSettings()), NodeIdentity("node-1", 3, online=True), store)  # type: ignore[arg-type]
    return hub, store


def _linked(hub: ClusterHub, node: str, epoch: int) -> PeerLink:
    link = PeerLink(hub)
    hub.link_hello(link, FrameDecoder().feed(frames.hello(node, epoch))[0][1])
    hub.recovery.resume(link, 0)  # the peer has handled none of our frames
    return link


class Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def writelines(self, data: list[bytes]) -> None:
        self.written.extend(data)

    def get_write_buffer_size(self) -> int:
        return 0  # (written at once)


def _with_persistent_session(hub: ClusterHub, node: str, client_id: str, topic: str) -> None:
    hub.table.route(node, topic, True)
    hub.table.durable_sub(node, client_id, DurableSub(topic, topic, 1, 0), True)


def _held_publishes(link: PeerLink, count: int) -> list[Hold]:
    """``count`` PUBLISH frames kept with a routed hold each."""
    holds = [Hold() for _ in range(count)]
    for n, hold in enumerate(holds):
        link.send_publish(b"frame", _message(b"%d" % n), True, hold)
        hold.routed()
    return holds


async def test_publish_acks_release_held_acks_in_batches() -> None:
    hub, _ = _hub()
    link = _linked(hub, "node-2", 5)
    holds = _held_publishes(link, 3)
    untracked = Hold()
    link.send_publish(b"frame", _message(b"x"), False, untracked)  # a node without sessions
    assert untracked.routed().acked
    assert not any(hold.acked for hold in holds)
    link.confirmed(2)
    assert [hold.acked for hold in holds] == [True, True, False]
    link.confirmed(4)
    assert holds[2].acked
    assert len(link.unconfirmed) == 0


async def test_a_publish_ack_carries_the_reason_of_frames_delivered_nowhere() -> None:
    hub, _ = _hub()
    link = _linked(hub, "node-2", 5)
    holds = _held_publishes(link, 3)
    ack = frames.publish_ack(3, [(2, 0x97)])
    [(kind, body)] = FrameDecoder().feed(ack)
    assert kind == Kind.PUBLISH_ACK
    assert frames.read_publish_ack(BodyReader(body)) == (3, {2: 0x97})
    assert frames.read_publish_ack(BodyReader(frames.publish_ack(3)[5:])) == (3, None)
    hub.handle_frame(link, kind, body)
    assert [hold.acked for hold in holds] == [True, True, True]
    assert [hold.reasons for hold in holds] == [[], [0x97], []]


async def test_frames_beyond_the_bound_are_given_up_and_their_acks_released(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(link_ledger, "MAX_UNCONFIRMED", 2)
    hub, _ = _hub()
    link = _linked(hub, "node-2", 5)
    holds = [Hold() for _ in range(3)]
    for hold in holds:
        link.send_publish(b"frame", _message(b"m"), True, hold)
        hold.routed()
    assert [hold.acked for hold in holds] == [True, False, False]


async def test_forwarding_holds_the_ack_until_the_node_confirms() -> None:
    hub, _ = _hub()
    link = _linked(hub, "node-2", 5)
    _with_persistent_session(hub, "node-2", "c1", "t")
    hold = Hold()
    assert hub.forward(_message(b"1"), hold) == 1
    assert not hold.routed().acked
    hub.handle_frame(link, Kind.PUBLISH_ACK, (1).to_bytes(8, "big"))
    assert hold.acked


async def test_a_clean_subscriber_on_another_node_needs_no_wait() -> None:
    hub, _ = _hub()
    _linked(hub, "node-2", 5)
    hub.table.route("node-2", "t", True)  # no persistent session on node-2
    assert not hub.may_hold()  # (so the publisher's flow makes no hold at all)
    hold = Hold()
    assert hub.forward(_message(b"1"), hold) == 1
    assert hold.routed().acked


def _forward_holds(hub: ClusterHub) -> bool:
    """Whether ``forward`` takes a hold of a message on ``t`` now (given one)."""
    hold = Hold()
    hub.forward(_message(b"1"), hold)
    return not hold.routed().acked


async def test_the_hub_may_hold_whenever_its_forward_takes_a_hold() -> None:
    """``may_hold`` (False: the publisher's PUBACK is not held for the router) is True in
    every state in which ``forward`` keeps something: a node with persistent sessions, a
    link resuming, a dead node's session (appends), a shared group elsewhere."""
    hub, store = _hub()
    link = _linked(hub, "node-2", 5)
    hub.table.route("node-2", "t", True)
    assert not hub.may_hold() and not _forward_holds(hub)
    link.resuming = True  # every frame is kept until the peer's RESUME
    assert hub.may_hold() and _forward_holds(hub)
    link.resuming = False
    hub.table.durable_sub("node-2", "c1", DurableSub("t", "t", 1, 0), True)
    assert hub.may_hold() and _forward_holds(hub)
    hub.table.durable_sub("node-2", "c1", DurableSub("t", "t", 1, 0), False)
    assert hub.may_hold() and _forward_holds(hub)  # unsubscribed: node-2 still has it
    hub.table.durable_gone("node-2", 5, "c1", False)  # the session ended there
    assert not hub.may_hold() and not _forward_holds(hub)
    hub.table.share("node-2", "g", "t", True)  # a shared group with members on node-2
    assert hub.may_hold()
    hub.table.share("node-2", "g", "t", False)
    assert not hub.may_hold()
    _with_persistent_session(hub, "node-3", "c3", "t")  # node-3 is not linked: ...
    hub.table.durable_gone("node-3", 1, "c3", True)  # ... and its session is an orphan now
    assert len(hub.table.orphans) and hub.may_hold() and _forward_holds(hub)
    assert store.appends == [("c3", ("node-3", 1), b"1")]


async def test_a_dead_node_s_unconfirmed_messages_release_after_their_appends() -> None:
    hub, store = _hub()
    link = _linked(hub, "node-2", 5)
    _with_persistent_session(hub, "node-2", "c1", "t")
    hold = Hold()
    hub.forward(_message(b"1"), hold)
    hold.routed()
    link.connection_lost(None)  # node-2 killed before its PUBLISH_ACK
    assert store.appends == [("c1", ("node-2", 5), b"1")]
    assert not hold.acked  # the append is not answered yet
    store.answer()
    assert hold.acked


async def test_a_refused_append_waits_for_the_new_owner_to_confirm_the_direct_frame() -> None:
    hub, store = _hub()
    _with_persistent_session(hub, "node-2", "c1", "t")
    dead = _linked(hub, "node-2", 5)
    new_owner = _linked(hub, "node-3", 8)
    hold = Hold()
    hub.forward(_message(b"1"), hold)
    hold.routed()
    dead.connection_lost(None)
    store.answer(moved_to=("node-3", 8))  # node-3 claimed c1 meanwhile
    assert not hold.acked
    sent = FrameDecoder().feed(b"".join(new_owner._out))  # written at the end of the tick
    assert [kind for kind, _ in sent if kind == Kind.DIRECT] == [Kind.DIRECT]
    new_owner.confirmed(1)  # its PUBLISH_ACK counts DIRECT frames too
    assert hold.acked


async def test_a_direct_frame_the_owner_never_confirmed_is_appended_expecting_that_run() -> None:
    hub, store = _hub()
    owner = _linked(hub, "node-3", 8)
    hold = Hold()
    hub.orphans.owner_moved("c1", _message(b"1"), 1, "node-3", 8, hold)
    hold.routed()
    owner.connection_lost(None)
    assert store.appends == [("c1", ("node-3", 8), b"1")]
    assert not hold.acked
    store.answer()
    assert hold.acked


async def test_received_direct_frames_are_counted_for_the_publish_ack() -> None:
    hub, _ = _hub()
    link = _linked(hub, "node-2", 5)
    transport = Transport()
    link.transport = transport  # type: ignore[assignment]
    record = hub.encode(_message(b"1"), 1, False)
    hub.handle_frame(link, Kind.DIRECT, frames.direct("c9", record)[5:])
    hub.handle_frame(link, Kind.PUBLISH, frames.publish(record)[5:])
    assert link.published_in == 2
    for _ in range(5):
        await asyncio.sleep(0)
    sent = FrameDecoder().feed(b"".join(transport.written))
    acks = [body for kind, body in sent if kind == Kind.PUBLISH_ACK]
    assert acks == [(2).to_bytes(8, "big")]
