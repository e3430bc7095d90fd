"""Shared subscriptions of a dead node's persistent sessions (``RouteTable.shared_orphans``):
a message for a group with no live member anywhere is appended to one of them (issue 12).
Pure logic: the appends go to ``AppendRecorder``."""

from __future__ import annotations

import asyncio

from tests.support.append_recorder import AppendRecorder
from xmq.cluster import link_frames as frames
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.link_frames import FrameDecoder
from xmq.cluster.peer_link import PeerLink
from xmq.cluster.route_table import (
    DurableSub,
    OrphanSub,
    PendingOrphans,
    RouteTable,
    group_of,
    shared_key,
)
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.message import Message
from xmq.core.settings import CoreSettings

DEAD = ("node-2", 5)


def _shared(group: str, topic_filter: str, qos: int = 1) -> DurableSub:
    return DurableSub(shared_key(group, topic_filter), topic_filter, qos, 0, -1, group)


def _members(table: RouteTable, topic: str) -> list[tuple[str, str, OrphanSub]]:
    return [
        (found.group, client_id, orphan)
        for found in table.shared_orphans.groups.match(topic)
        for client_id, orphan in found.members.items()
    ]


def test_a_dsub_key_names_its_share_group() -> None:
    assert shared_key("g", "a/+/c") == "$share/g/a/+/c"
    assert group_of(shared_key("g", "a/+/c")) == "g"
    assert group_of("a/b") is None
    assert group_of("$share/nofilter") is None


def test_a_dead_nodes_shared_persistent_subscriptions_become_shared_orphans() -> None:
    table = RouteTable()
    table.share("node-2", "g", "a/b", True)
    table.durable_sub("node-2", "c1", _shared("g", "a/b"), True)
    table.durable_sub("node-2", "c2", DurableSub("a/b", "a/b", 1, 0), True)
    fresh = table.forget_node(*DEAD, orphan=True)
    assert _members(table, "a/b") == [("g", "c1", OrphanSub(DEAD, 1, 0))]
    assert [cid for cid, _ in table.orphans.tree.match("a/b")] == ["c2"]  # not c1
    assert [cid for cid, _ in fresh.tree.match("a/b")] == ["c2"]


def test_a_shared_member_that_moved_here_or_was_announced_again_is_no_orphan() -> None:
    table = RouteTable()
    table.durable_sub("node-2", "c1", _shared("g", "t"), True)
    table.durable_sub("node-2", "c2", _shared("g", "t"), True)
    table.forget_node(*DEAD, orphan=True, here={"c1"})
    assert [cid for _, cid, _ in _members(table, "t")] == ["c2"]
    table.durable_sub("node-3", "c2", _shared("g", "t"), True)  # its new owner announces it
    assert _members(table, "t") == []
    assert len(table.shared_orphans) == 0


def test_a_handed_over_shared_member_is_a_shared_orphan_until_announced() -> None:
    table = RouteTable()
    table.durable_sub("node-2", "c1", _shared("g", "t", 2), True)
    table.durable_gone(*DEAD, "c1", orphan=True)
    assert _members(table, "t") == [("g", "c1", OrphanSub(DEAD, 2, 0))]
    assert len(table.orphans) == 0


def test_a_pending_runs_shared_members_are_adopted_with_its_other_sessions() -> None:
    table = RouteTable()
    pending = PendingOrphans("127.0.0.1:1")
    pending.shared.add("c1", "g", "t", OrphanSub(DEAD, 1, 0))
    pending.adopt_into(table)
    assert _members(table, "t") == [("g", "c1", OrphanSub(DEAD, 1, 0))]


def _hub() -> tuple[ClusterHub, AppendRecorder, PeerLink]:
    """node-1, linked to node-2 (epoch 5), which announced ``m``'s ``$share/g/t`` (QoS 1)."""
    store = AppendRecorder()
    hub = ClusterHub(Broker(CoreSettings()), NodeIdentity("node-1", 1, online=True), store)  # type: ignore[arg-type]
    link = PeerLink(hub)
    hub.link_hello(link, FrameDecoder().feed(frames.hello(*DEAD))[0][1])
    hub.recovery.resume(link, 0)
    data = frames.share(True, "g", "t") + frames.durable_sub(True, "m", "$share/g/t", "t", 1, 0)
    for kind, body in FrameDecoder().feed(data):
        hub.handle_frame(link, kind, body)
    return hub, store, link


def _message(qos: int, payload: bytes = b"x") -> Message:
    return Message("t", payload, qos, False, None, "p", 0.0)


async def test_a_group_without_a_live_member_is_appended_to_its_dead_members_queue() -> None:
    hub, store, link = _hub()
    assert hub.has_shared("g", "t")
    hub.drop_link(link, orphan=True)  # node-2 is dead
    assert not hub.has_shared("g", "t")
    assert hub.forward(_message(1, b"one")) == 1
    assert hub.forward(_message(2, b"two")) == 1  # delivered with the member's QoS 1
    assert hub.forward(_message(0, b"zero")) == 0  # QoS 0 is not kept for it
    assert store.appends == [("m", DEAD, b"one"), ("m", DEAD, b"two")]
    await asyncio.sleep(0)


async def test_a_live_member_elsewhere_takes_the_groups_messages_instead() -> None:
    hub, store, link = _hub()
    hub.drop_link(link, orphan=True)
    hub.table.share("node-3", "g", "t", True)  # a live member on node-3
    hub.forward(_message(1))
    assert store.appends == []
    await asyncio.sleep(0)


async def test_a_shared_message_the_dead_node_had_not_confirmed_goes_to_the_queue() -> None:
    """Sent to node-2's group (SHARED) and not confirmed when its link died: no other member
    is left, so it is appended for the dead node's persistent member (before: dropped)."""
    hub, store, link = _hub()
    assert hub.forward(_message(1, b"in flight")) == 1  # a SHARED frame to node-2
    assert store.appends == []
    hub.drop_link(link, orphan=True)
    assert store.appends == [("m", DEAD, b"in flight")]
    await asyncio.sleep(0)
