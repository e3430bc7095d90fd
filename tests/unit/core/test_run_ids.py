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


def test_raw_ids_are_the_ids_encoded_numbered_with_the_others() -> None:
    identity = NodeIdentity("nöde-1", 3)  # (a non-ASCII node id: its UTF-8 bytes)
    ids = RunIds(identity)
    assert ids.next_raw() == "nöde-1/3/1".encode()
    assert ids.next() == "nöde-1/3/2"  # one numbering for both forms
    assert ids.next_raw() == "nöde-1/3/3".encode()
    assert ids.last_id() == "nöde-1/3/3"


def test_a_new_run_s_raw_ids_get_its_prefix() -> None:
    identity = NodeIdentity("node-1", 3)
    ids = RunIds(identity, "f")
    assert ids.next_raw() == b"node-1/3/f1"
    identity.epoch = 4
    assert ids.next_raw() == b"node-1/4/f2"
    assert ids.last_id() == "node-1/4/f2"
    identity.node_id = "node-9"
    assert ids.next() == "node-9/4/f3"  # the str form sees the new run too
    assert ids.next_raw() == b"node-9/4/f4"


def test_raw_ids_past_a_thousand_are_the_ids_encoded() -> None:
    identity = NodeIdentity("node-1", 3)
    raw, text = RunIds(identity), RunIds(identity)
    for _ in range(12_345):  # (the thousands made once per 1,000 ids, the rest from a table)
        assert raw.next_raw() == text.next().encode()
    identity.epoch = 4  # a new run past a thousand: its prefix, the numbers going on
    assert raw.next_raw() == b"node-1/4/12346"
    raw.last = 998  # (set back: the thousands are checked per id, not counted)
    assert [raw.next_raw() for _ in range(3)] == [
        b"node-1/4/999",
        b"node-1/4/1000",
        b"node-1/4/1001",
    ]
