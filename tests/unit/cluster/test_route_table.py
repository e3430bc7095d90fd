"""Routes learned from peers, and persistent sessions orphaned when a peer's link drops."""

from __future__ import annotations

from xmq.cluster.route_table import DurableSub, OrphanSub, RouteTable


def test_forget_node_drops_routes_and_orphans_durable_sessions() -> None:
    table = RouteTable()
    table.route("node-2", "a/#", True)
    table.route("node-3", "a/#", True)
    table.share("node-2", "g", "a/b", True)
    table.durable_sub("node-2", "c1", DurableSub("a/b", "a/b", 1, 0), True)
    table.forget_node("node-2", 4, orphan=True)
    assert [node for node, _ in table.routes.match("a/b")] == ["node-3"]
    assert table.shares.get_group("g", "a/b") is None
    assert table.orphans.tree.match("a/b") == [("c1", OrphanSub(("node-2", 4), 1, 0))]


def test_a_session_that_moved_here_while_the_link_was_down_is_no_orphan() -> None:
    """Its client reconnected here before the link was given up: its own subscriptions route
    its messages now (an orphan entry would route each of them a second time, as a DIRECT to
    the owner found in Redis: this node). What was sent to the old node for it still goes."""
    table = RouteTable()
    table.durable_sub("node-2", "c1", DurableSub("t", "t", 2, 0), True)
    table.durable_sub("node-2", "c2", DurableSub("t", "t", 2, 0), True)
    fresh = table.forget_node("node-2", 1, orphan=True, here={"c1"})
    assert [cid for cid, _ in table.orphans.tree.match("t")] == ["c2"]
    assert sorted(cid for cid, _ in fresh.tree.match("t")) == ["c1", "c2"]


def test_a_new_owner_announcing_the_session_ends_the_orphan() -> None:
    table = RouteTable()
    table.durable_sub("node-2", "c1", DurableSub("t", "t", 1, 0), True)
    table.forget_node("node-2", 1, orphan=True)
    assert len(table.orphans) == 1
    table.durable_sub("node-4", "c1", DurableSub("t", "t", 1, 0), True)
    assert len(table.orphans) == 0
    assert table.orphans.tree.match("t") == []


def test_without_a_store_nothing_is_orphaned() -> None:
    table = RouteTable()
    table.durable_sub("node-2", "c1", DurableSub("t", "t", 1, 0), True)
    table.forget_node("node-2", 1, orphan=False)
    assert len(table.orphans) == 0


def test_a_handed_over_session_is_an_orphan_until_announced_again() -> None:
    table = RouteTable()
    table.durable_sub("node-1", "c1", DurableSub("t", "t", 1, 0), True)
    table.durable_gone("node-1", 3, "c1", orphan=True)
    assert table.orphans.tree.match("t") == [("c1", OrphanSub(("node-1", 3), 1, 0))]
    table.durable_sub("node-2", "c1", DurableSub("t", "t", 1, 0), True)
    assert table.orphans.tree.match("t") == []


def test_an_ended_session_leaves_no_orphan() -> None:
    table = RouteTable()
    table.durable_sub("node-1", "c1", DurableSub("t", "t", 1, 0), True)
    table.durable_sub("node-1", "c1", DurableSub("t", "t", 1, 0), False)
    table.durable_gone("node-1", 3, "c1", orphan=True)
    assert len(table.orphans) == 0
