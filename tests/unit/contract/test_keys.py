from __future__ import annotations

import pytest

from xmq.contract import ClusterKeys, InvalidNameError, node_id_for, split_node_id


def test_every_key_starts_with_the_versioned_hash_tagged_prefix() -> None:
    keys = ClusterKeys("prod.eu-1")
    built = [
        keys.node_epoch("xmq-0-0"),
        keys.lease("xmq-0-0"),
        keys.members(),
        keys.node_sessions("xmq-0-0"),
        keys.session_owner("c1"),
        keys.orphaned_sessions(),
        keys.session_state("c1"),
        keys.session_subscriptions("c1"),
        keys.session_queue("c1"),
        keys.session_inflight("c1"),
        keys.session_qos2_inbound("c1"),
        keys.retained("a/b"),
        keys.retained_index(),
        keys.retained_revision(),
    ]
    assert all(key.startswith("xmq:v1:{prod.eu-1}:") for key in built)
    assert len(set(built)) == len(built)


def test_exact_key_names_are_the_documented_ones() -> None:
    keys = ClusterKeys("c")
    assert keys.lease("xmq-3-1") == "xmq:v1:{c}:node:lease:xmq-3-1"
    assert keys.node_epoch("xmq-3-1") == "xmq:v1:{c}:node:epoch:xmq-3-1"
    assert keys.node_sessions("xmq-3-1") == "xmq:v1:{c}:node:sessions:xmq-3-1"
    assert keys.members() == "xmq:v1:{c}:members"
    assert keys.session_owner("dev/1") == "xmq:v1:{c}:session:owner:dev/1"
    assert keys.orphaned_sessions() == "xmq:v1:{c}:sessions:orphaned"
    assert keys.retained("a/b") == "xmq:v1:{c}:retained:msg:a/b"
    assert keys.lease_pattern() == "xmq:v1:{c}:node:lease:*"


def test_a_client_id_with_colons_cannot_collide_with_another_kind_of_key() -> None:
    keys = ClusterKeys("c")
    tricky = keys.session_queue("x:owner")
    assert tricky not in {keys.session_owner("x"), keys.session_owner("queue:x")}
    assert keys.session_owner("queue:x") != keys.session_queue("x")


@pytest.mark.parametrize(
    "name",
    ["", "a:b", "a{b", "a}b", "-a", "a-", "a b", "x" * 129],
    ids=[
        "empty",
        "colon",
        "open-brace",
        "close-brace",
        "leading-dash",
        "trailing-dash",
        "space",
        "too-long",
    ],
)
def test_bad_cluster_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidNameError):
        ClusterKeys(name)


def test_node_ids_round_trip_through_pod_name_and_worker() -> None:
    node_id = node_id_for("xmq-prod-12", 3)
    assert node_id == "xmq-prod-12-3"
    assert split_node_id(node_id) == ("xmq-prod-12", 3)


@pytest.mark.parametrize(
    "node_id",
    ["xmq", "xmq-", "-1", "xmq-a", "xmq-12345"],
    ids=["no-worker", "empty-worker", "no-pod", "non-numeric-worker", "worker-too-big"],
)
def test_malformed_node_ids_are_refused(node_id: str) -> None:
    with pytest.raises(InvalidNameError):
        split_node_id(node_id)


def test_empty_parts_are_refused() -> None:
    keys = ClusterKeys("c")
    with pytest.raises(InvalidNameError):
        keys.lease("")
    with pytest.raises(InvalidNameError):
        keys.retained("")
    with pytest.raises(InvalidNameError):
        node_id_for("xmq-0", -1)
