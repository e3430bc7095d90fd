"""When a session read from Redis as a live run's stops waiting for that run
(``PendingOwners``, ``table.pending``): not when the run's link forms — a run that owns the
session in Redis without having announced it would leave its messages matching nothing here
(PUBACK 0x10, lost; issue 12) — but when a node announces it, when the run is gone, or when
Redis names another owner (re-checked, a bounded batch per pass)."""

from __future__ import annotations

from collections.abc import Sequence

from tests.support.append_recorder import AppendRecorder
from xmq.cluster import link_frames as frames
from xmq.cluster import pending_owners
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_frames import BodyReader, FrameDecoder, Kind
from xmq.cluster.peer_link import PeerLink
from xmq.cluster.pending_owners import PendingOwners
from xmq.cluster.route_table import DurableSub, OrphanSub, PendingOrphans
from xmq.contract.keys import ClusterKeys
from xmq.contract.records import NodeLease, SessionOwner
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.message import Message
from xmq.core.settings import CoreSettings

OWNER = ("node-1", 7)
KEYS = ClusterKeys("c")


def _lease(node: str, epoch: int) -> NodeLease:
    return NodeLease(
        node_id=node, pod_name=node, pod_uid="u", address=f"{node}:1", epoch=epoch, started_at=0
    )


class Redis:
    """Owner records as Redis holds them (``MGET``), and how many keys each call read."""

    def __init__(self) -> None:
        self.owners: dict[str, SessionOwner] = {}
        self.reads: list[int] = []

    async def read(self, keys: list[str]) -> Sequence[bytes | str | None]:
        self.reads.append(len(keys))
        by_key = {KEYS.session_owner(c): o.to_json() for c, o in self.owners.items()}
        return [by_key.get(key) for key in keys]


class Setup:
    def __init__(self, sessions: int = 1) -> None:
        self.store = AppendRecorder()
        self.hub = ClusterHub(
            Broker(CoreSettings()),
            NodeIdentity("node-2", 3, online=True),
            self.store,  # type: ignore[arg-type]
        )
        pending = PendingOrphans("node-1:1")
        self.redis = Redis()
        for n in range(sessions):
            client_id = "sub" if n == 0 else f"sub{n}"
            pending.index.add(client_id, "t/+", OrphanSub(OWNER, 1, 0))
            self.redis.owners[client_id] = SessionOwner(node_id="node-1", epoch=7)
        self.hub.table.pending[OWNER] = pending
        self.now = 0.0
        self.refused: set[str] = set()

        def linked_epoch(node: str) -> int | None:
            link = self.hub.links.get(node)
            return None if link is None else link.peer_epoch

        async def reachable(address: str) -> bool:
            return address not in self.refused

        self.pending = PendingOwners(
            self.hub.table,
            linked_epoch,
            reachable,
            self.redis.read,
            KEYS,
            lambda: ("node-2", 3),
            lambda: self.now,
            10.0,
        )
        self.peers = {"node-1": _lease("node-1", 7)}

    def link(self, node: str, epoch: int) -> PeerLink:
        link = PeerLink(self.hub)
        self.hub.link_hello(link, FrameDecoder().feed(frames.hello(node, epoch))[0][1])
        self.hub.recovery.resume(link, 0)
        return link

    async def round_later(self) -> None:
        """A pass now (the first one: the first re-check round is due ``recheck_s`` later),
        then one ``recheck_s`` later."""
        await self.pending.settle(self.peers)
        self.now += 10.0
        await self.pending.settle(self.peers)

    def waiting(self) -> list[str]:
        pending = self.hub.table.pending.get(OWNER)
        return [] if pending is None else sorted(pending.index.by_client)


def _message(payload: bytes) -> Message:
    return Message("t/1", payload, 1, False, None, "pub", 0.0)


def _directs(link: PeerLink) -> list[str]:
    return [
        BodyReader(body).text()
        for kind, body in FrameDecoder().feed(b"".join(link._out))
        if kind == Kind.DIRECT
    ]


async def test_a_linked_owner_that_has_not_announced_the_session_keeps_getting_its_messages() -> (
    None
):
    setup = Setup()
    link = setup.link("node-1", 7)  # its snapshot named no such session (not attached there)
    for _ in range(3):  # peer-loop passes with the link up
        await setup.pending.settle(setup.peers)
    assert setup.waiting() == ["sub"]  # before: dropped at the first pass, then 0x10
    assert setup.hub.forward(_message(b"m1")) == 1
    assert _directs(link) == ["sub"]


async def test_its_announcement_ends_the_wait() -> None:
    setup = Setup()
    setup.link("node-1", 7)
    setup.hub.table.durable_sub("node-1", "sub", DurableSub("t/+", "t/+", 1, 0), True)
    assert setup.waiting() == []
    await setup.pending.settle(setup.peers)
    assert OWNER not in setup.hub.table.pending


async def test_a_run_gone_leaves_its_sessions_to_their_queues() -> None:
    setup = Setup()
    setup.link("node-1", 8)  # node-1 restarted: the pending run is dead
    setup.peers = {"node-1": _lease("node-1", 8)}
    await setup.pending.settle(setup.peers)
    assert OWNER not in setup.hub.table.pending
    assert "sub" in setup.hub.table.orphans.by_client


async def test_an_unlinked_run_whose_port_refuses_is_adopted_and_a_reachable_one_waits() -> None:
    setup = Setup()
    await setup.pending.settle(setup.peers)
    assert setup.waiting() == ["sub"]  # alive, not linked yet
    setup.refused.add("node-1:1")
    await setup.pending.settle(setup.peers)
    assert OWNER not in setup.hub.table.pending
    assert "sub" in setup.hub.table.orphans.by_client


async def test_redis_is_asked_again_once_per_round_and_the_run_s_sessions_keep_waiting() -> None:
    setup = Setup()
    setup.link("node-1", 7)
    await setup.pending.settle(setup.peers)
    assert setup.redis.reads == []  # the first round comes ``recheck_s`` later
    await setup.round_later()
    assert setup.redis.reads == [1]
    assert setup.waiting() == ["sub"]  # still node-1's run's
    setup.now = 15.0
    await setup.pending.settle(setup.peers)
    assert setup.redis.reads == [1]  # not due yet


async def test_a_session_that_ended_leaves() -> None:
    setup = Setup()
    del setup.redis.owners["sub"]
    await setup.round_later()
    await setup.pending.settle(setup.peers)
    assert setup.waiting() == []
    assert "sub" not in setup.hub.table.orphans.by_client
    assert OWNER not in setup.hub.table.pending


async def test_a_session_another_live_run_owns_now_waits_for_that_run() -> None:
    setup = Setup()
    setup.peers["node-3"] = _lease("node-3", 2)
    setup.redis.owners["sub"] = SessionOwner(node_id="node-3", epoch=2)
    await setup.round_later()
    assert setup.waiting() == []
    moved = setup.hub.table.pending[("node-3", 2)]
    assert moved.address == "node-3:1"
    assert moved.index.tree.get("t/+", "sub") == OrphanSub(("node-3", 2), 1, 0)
    link = setup.link("node-3", 2)
    assert setup.hub.forward(_message(b"m1")) == 1
    assert _directs(link) == ["sub"]


async def test_a_session_a_dead_run_owns_now_is_its_orphan() -> None:
    setup = Setup()
    setup.redis.owners["sub"] = SessionOwner(node_id="node-3", epoch=1)  # no lease
    await setup.round_later()
    assert setup.waiting() == []
    assert setup.hub.table.orphans.tree.get("t/+", "sub") == OrphanSub(("node-3", 1), 1, 0)
    assert setup.hub.forward(_message(b"m1")) == 1
    assert setup.store.appends == [("sub", ("node-3", 1), b"m1")]


async def test_a_session_this_node_owns_now_leaves_to_its_own_routes() -> None:
    setup = Setup()
    setup.redis.owners["sub"] = SessionOwner(node_id="node-2", epoch=3)
    await setup.round_later()
    assert setup.waiting() == []
    assert "sub" not in setup.hub.table.orphans.by_client
    assert not any(len(p.index) for p in setup.hub.table.pending.values())


async def test_each_pass_reads_a_bounded_batch() -> None:
    batch = pending_owners.RECHECK_BATCH
    setup = Setup(sessions=batch + 10)
    setup.link("node-1", 7)
    await setup.round_later()
    await setup.pending.settle(setup.peers)
    await setup.pending.settle(setup.peers)  # the round is over: the next one comes later
    assert setup.redis.reads == [batch, 10]
    assert len(setup.waiting()) == batch + 10


async def test_a_session_announced_before_it_was_read_leaves_at_its_re_check() -> None:
    setup = Setup()
    setup.link("node-1", 7)
    setup.hub.table.durable_sub("node-1", "sub", DurableSub("t/+", "t/+", 1, 0), True)
    setup.hub.table.pending[OWNER].index.add("sub", "t/+", OrphanSub(OWNER, 1, 0))  # read late
    await setup.round_later()
    assert setup.waiting() == []
