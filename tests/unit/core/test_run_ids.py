"""``RunIds``: the ids a node numbers per run (forward ids, the durable store's record ids)."""

from __future__ import annotations

from xmq.core.cluster_ports import NodeIdentity, RunIds


def test_ids_are_numbered_under_the_run_s_prefix() -> None:
    identity = NodeIdentity("node-1", 3)
    ids = RunIds(identity, "f")
    assert (ids.next(), ids.next()) == ("node-1/3/f1", "node-1/3/f2")
    assert ids.last == 2
    assert ids.last_id() == "node-1/3/f2"
    assert RunIds(identity).next() == "node-1/3/1"  # no tag: the store's own record ids


def test_a_new_run_gets_its_prefix_and_the_numbers_go_on() -> None:
    identity = NodeIdentity("node-1", 3)
    ids = RunIds(identity, "f")
    ids.next()
    identity.epoch = 4  # rejoined under a new epoch
    assert ids.next() == "node-1/4/f2"
    identity.node_id = "node-9"
    assert ids.next() == "node-9/4/f3"
    assert ids.last_id() == "node-9/4/f3"
