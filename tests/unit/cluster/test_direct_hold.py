"""Messages for a session owned here: delivered, held while its claim attaches it, or queued."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.append_recorder import AppendRecorder
from tests.support.virtual_loop import VirtualLoop
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.direct_hold import POLL_S, Direct, DirectHold
from xmq.core.broker import Broker
from xmq.core.cluster_ports import DurableContext, DurableHold, NodeIdentity
from xmq.core.lease_fence import LeaseFence
from xmq.core.message import Message
from xmq.core.settings import CoreSettings


class FakeBroker:
    def __init__(self) -> None:
        self.sessions: dict[str, Any] = {}
        self.claiming: dict[str, int] = {}
        self.delivered: list[tuple[str, bytes]] = []
        self.contexts: list[DurableContext] = []
        self.changed = asyncio.Event()
        self.fence = LeaseFence()
        self.fence.watch(self.changed.set)  # a held re-check asks for a renewal

    def deliver_direct(self, client_id: str, direct: Direct, context: DurableContext) -> bool:
        assert client_id in self.sessions
        self.delivered.append((client_id, direct[0].payload))
        self.contexts.append(context)
        self.changed.set()
        return True


def _direct(payload: bytes) -> Direct:
    return (Message("t", payload, 1, False, None, "pub", 0.0), 1, False, ())


async def _until(condition: Callable[[], bool], changed: asyncio.Event) -> None:
    async with asyncio.timeout(2):
        while not condition():
            changed.clear()
            await changed.wait()


def _hold(broker: FakeBroker, max_hold_s: float = 5.0) -> tuple[DirectHold, list[str]]:
    not_here: list[str] = []

    def append(client_id: str, direct: Direct, hold: DurableHold | None) -> None:
        not_here.append(f"{client_id}:{direct[0].payload.decode()}")
        broker.changed.set()

    return DirectHold(broker, append, max_hold_s), not_here


async def test_an_attached_session_gets_the_message_at_once() -> None:
    broker = FakeBroker()
    broker.sessions["c1"] = object()
    hold, not_here = _hold(broker)
    hold.deliver("c1", _direct(b"1"))
    assert broker.delivered == [("c1", b"1")]
    assert not_here == []
    assert len(hold) == 0


class CountingHold:
    def __init__(self) -> None:
        self.holds = 0

    def hold(self) -> None:
        self.holds += 1

    def release(self) -> None:
        self.holds -= 1

    def fail(self) -> None:
        raise AssertionError("nothing failed")

    def undelivered(self, reason: int) -> None:
        self.holds -= 1


async def test_the_delivery_gets_the_publisher_s_hold_and_the_message_s_id() -> None:
    broker = FakeBroker()
    broker.sessions["c1"] = object()
    broker.claiming["c2"] = 1
    hold, _ = _hold(broker)
    first, second = CountingHold(), CountingHold()
    message = Message("t", b"1", 1, False, None, "pub", 0.0, forward_id="node-2/4/f7")
    hold.deliver("c1", (message, 1, False, ()), first)
    hold.deliver("c2", _direct(b"2"), second)  # held while c2's claim attaches it
    assert second.holds == 1
    del broker.claiming["c2"]
    broker.sessions["c2"] = object()
    await _until(lambda: len(broker.delivered) == 2, broker.changed)
    # the session's record takes both from the call, not from state set on the store
    contexts = [(context.hold, context.forward_id) for context in broker.contexts]
    assert contexts == [(first, "node-2/4/f7"), (second, "")]
    assert second.holds == 0  # the wait's own hold is given back once delivered


def test_messages_wait_for_the_claiming_connect_to_attach_the_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = VirtualLoop()  # the hold's re-check timer, on a clock moved by hand
    monkeypatch.setattr(asyncio, "get_running_loop", lambda: loop)
    broker = FakeBroker()
    broker.claiming["c1"] = 1  # the claim ran in Redis; the CONNECT has not resumed yet
    hold, not_here = _hold(broker)
    hold.deliver("c1", _direct(b"1"))
    hold.deliver("c1", _direct(b"2"))
    for _ in range(4):  # re-checks while the claim runs: each one keeps holding
        loop.advance(POLL_S)
        assert loop.run_turn() == 1
    assert broker.delivered == [] and not_here == []
    assert len(hold) == 1 and loop.pending() == 1
    del broker.claiming["c1"]
    broker.sessions["c1"] = object()  # attached
    hold.deliver("c1", _direct(b"3"))  # behind the held ones, not before them
    assert broker.delivered == []  # not before the next re-check
    loop.advance(POLL_S)
    loop.run_turn()
    assert broker.delivered == [("c1", b"1"), ("c1", b"2"), ("c1", b"3")]
    assert not_here == []
    assert len(hold) == 0


async def test_a_re_check_past_the_lease_fence_waits_for_the_lease_to_be_proven() -> None:
    """After a pause the held messages' re-check must not deliver or queue them before the
    node has proven its lease (another node may own the session by then)."""
    broker = FakeBroker()
    broker.claiming["c1"] = 1
    hold, not_here = _hold(broker, max_hold_s=0.0)  # the claim's wait is over at once
    loop = asyncio.get_running_loop()
    broker.fence.proven(loop.time() - 20.0, 10.0)  # last proven 20 s ago: unproven now
    hold.deliver("c1", _direct(b"1"))
    await _until(lambda: broker.fence.waiting == 1, broker.changed)
    assert broker.delivered == [] and not_here == [] and len(hold) == 1
    del broker.claiming["c1"]
    broker.sessions["c1"] = object()
    broker.fence.proven(loop.time(), 10.0)  # the renewal succeeded: the re-check runs
    assert broker.delivered == [("c1", b"1")] and len(hold) == 0


async def test_a_claim_that_never_attaches_sends_held_messages_to_the_store() -> None:
    broker = FakeBroker()
    broker.claiming["c1"] = 1
    hold, not_here = _hold(broker)
    hold.deliver("c1", _direct(b"1"))
    del broker.claiming["c1"]  # the client went away during the claim
    await _until(lambda: len(not_here) == 1, broker.changed)
    assert not_here == ["c1:1"]
    assert broker.delivered == []


async def test_a_claim_running_past_the_limit_sends_held_messages_to_the_store() -> None:
    broker = FakeBroker()
    broker.claiming["c1"] = 1
    hold, not_here = _hold(broker, max_hold_s=0.02)
    hold.deliver("c1", _direct(b"1"))
    await _until(lambda: len(not_here) == 1, broker.changed)
    assert len(hold) == 0


async def test_a_session_neither_here_nor_claimed_goes_to_the_store() -> None:
    broker = FakeBroker()
    hold, not_here = _hold(broker)
    hold.deliver("c1", _direct(b"1"))
    assert not_here == ["c1:1"]
    assert broker.delivered == []


def _hub() -> tuple[ClusterHub, Broker, AppendRecorder]:
    broker = Broker(CoreSettings())
    store = AppendRecorder()
    hub = ClusterHub(broker, NodeIdentity("node-1", 7, online=True), store)  # type: ignore[arg-type]
    return hub, broker, store


async def test_hub_queues_a_message_for_a_session_it_owns_but_does_not_hold() -> None:
    hub, broker, store = _hub()
    hub.direct.deliver("c1", _direct(b"1"))
    # appended while the owner record still names this run of this node
    assert store.appends == [("c1", ("node-1", 7), b"1")]
    store.on_moved[0]("", 0)  # the session ended meanwhile: nothing to deliver
    assert broker.stats.dropped_by_reason == {}


async def test_hub_holds_its_own_refused_orphan_append_until_the_claim_attaches() -> None:
    hub, broker, store = _hub()
    broker.claiming["c1"] = 1
    message = _direct(b"1")[0]
    # an append for the dead owner was refused: this node (run 7) claimed the session
    hub.orphans.owner_moved("c1", message, 1, "node-1", 7)
    assert len(hub.direct) == 1
    assert store.appends == []
    del broker.claiming["c1"]  # not attached: into its Redis queue
    await _until(lambda: len(store.appends) == 1, store.changed)
    assert store.appends == [("c1", ("node-1", 7), b"1")]
