"""Messages for a session's new owner that is not linked yet: sent on its HELLO, else queued."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.append_recorder import AppendRecorder
from tests.support.virtual_loop import VirtualLoop
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_frames import FrameDecoder, Kind
from xmq.cluster.link_wait import LinkWait, Owner, Waiting
from xmq.cluster.peer_link import PeerLink
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.message import Message
from xmq.core.settings import CoreSettings


def _message(payload: bytes) -> Message:
    return Message("t", payload, 1, False, None, "pub", 0.0)


def test_waiting_messages_are_taken_in_order_when_the_owner_links(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = VirtualLoop()  # the wait's timers, on a clock moved by hand
    monkeypatch.setattr(asyncio, "get_running_loop", lambda: loop)
    expired: list[tuple[Owner, Waiting]] = []

    def give_up(owner: Owner, waiting: Waiting) -> None:
        expired.append((owner, waiting))

    wait = LinkWait(give_up, 0.02)
    wait.add(("node-4", 9), "c1", _message(b"1"), 1)
    wait.add(("node-4", 9), "c2", _message(b"2"), 1)
    wait.add(("node-5", 1), "c3", _message(b"3"), 1)
    assert len(wait) == 2 and loop.pending() == 2
    taken = wait.take(("node-4", 9))
    assert [(client_id, m.payload) for client_id, m, _, _ in taken] == [("c1", b"1"), ("c2", b"2")]
    assert wait.take(("node-4", 9)) == []
    loop.advance(0.019)
    loop.run_turn()
    assert expired == []  # not before its wait is over
    loop.advance(0.002)
    loop.run_turn()  # node-5 never linked
    assert [owner for owner, _ in expired] == [("node-5", 1)]
    loop.advance(0.05)
    loop.run_turn()
    assert len(expired) == 1 and loop.pending() == 0  # the taken run's timer was cancelled


def _hub() -> tuple[ClusterHub, AppendRecorder]:
    store = AppendRecorder()
    identity = NodeIdentity("node-1", 3, online=True)
    hub = ClusterHub(Broker(CoreSettings()), identity, store)  # type: ignore[arg-type]
    return hub, store


async def test_a_new_owner_not_linked_yet_gets_the_messages_when_it_says_hello() -> None:
    hub, store = _hub()
    # an orphan append was refused: node-4's new run (a node just restarted) claimed c1
    hub.orphans.owner_moved("c1", _message(b"1"), 1, "node-4", 9)
    assert len(hub.link_wait) == 1
    link = PeerLink(hub)
    hub.link_hello(link, FrameDecoder().feed(frames.hello("node-4", 9))[0][1])
    hub.recovery.resume(link, 0)  # the peer has handled none of our frames
    sent = FrameDecoder().feed(b"".join(link._out))
    directs = [body for kind, body in sent if kind == Kind.DIRECT]
    assert len(directs) == 1
    reader = frames.BodyReader(directs[0])
    assert reader.text() == "c1"
    assert len(hub.link_wait) == 0
    assert store.appends == []


async def test_an_owner_run_older_than_the_linked_one_is_dead_its_queue_gets_it() -> None:
    hub, store = _hub()
    link = PeerLink(hub)
    hub.link_hello(link, FrameDecoder().feed(frames.hello("node-4", 9))[0][1])
    hub.recovery.resume(link, 0)  # the peer has handled none of our frames
    hub.orphans.owner_moved("c1", _message(b"1"), 1, "node-4", 8)
    assert store.appends == [("c1", ("node-4", 8), b"1")]
    assert len(hub.link_wait) == 0
