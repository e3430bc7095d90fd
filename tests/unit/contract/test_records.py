from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from xmq.contract import (
    CleanupOutcome,
    CleanupResult,
    ClusterKeys,
    NodeLease,
    SessionOwner,
    release_dead_node,
)


def _lease(**overrides: object) -> NodeLease:
    fields: dict[str, object] = {
        "node_id": "xmq-0-0",
        "pod_name": "xmq-0",
        "pod_uid": "uid-a",
        "address": "10.0.0.5:7884",
        "epoch": 7,
        "started_at": 1700000000.5,
    }
    fields.update(overrides)
    return NodeLease.model_validate(fields)


def test_a_lease_has_the_documented_json_shape() -> None:
    assert json.loads(_lease().to_json()) == {
        "node_id": "xmq-0-0",
        "pod_name": "xmq-0",
        "pod_uid": "uid-a",
        "address": "10.0.0.5:7884",
        "epoch": 7,
        "started_at": 1700000000.5,
    }


def test_readers_ignore_fields_added_by_a_newer_writer() -> None:
    raw = json.dumps({**json.loads(_lease().to_json()), "zone": "eu-west-1a"})
    assert NodeLease.from_json(raw) == _lease()


@pytest.mark.parametrize(
    ("field", "value"),
    [("epoch", 0), ("pod_uid", ""), ("started_at", -1.0), ("node_id", "x")],
    ids=["zero-epoch", "empty-uid", "negative-start", "short-node-id"],
)
def test_invalid_leases_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValidationError):
        _lease(**{field: value})


def test_session_owner_round_trips() -> None:
    owner = SessionOwner(node_id="xmq-1-0", epoch=3)
    assert SessionOwner.from_json(owner.to_json()) == owner


def test_release_call_passes_keys_in_script_order_and_epoch_as_text() -> None:
    keys = ClusterKeys("c")
    call = release_dead_node(keys, "xmq-1-0", "uid-b", 4)
    assert call.keys == (
        keys.lease("xmq-1-0"),
        keys.node_sessions("xmq-1-0"),
        keys.orphaned_sessions(),
        keys.members(),
        keys.node_epoch("xmq-1-0"),
    )
    assert call.args == ("xmq-1-0", "uid-b", "4")
    assert release_dead_node(keys, "xmq-1-0", "uid-b").args[2] == ""


def test_release_call_refuses_a_missing_uid_or_bad_epoch() -> None:
    keys = ClusterKeys("c")
    with pytest.raises(ValueError, match="UID"):
        release_dead_node(keys, "xmq-1-0", "")
    with pytest.raises(ValueError, match="epoch"):
        release_dead_node(keys, "xmq-1-0", "uid", 0)


def test_cleanup_reply_is_decoded() -> None:
    assert CleanupResult.from_reply([1, 5]) == CleanupResult(CleanupOutcome.LEASE_DELETED, 5)
    assert CleanupResult.from_reply([-1, 0]).outcome is CleanupOutcome.LEASE_IS_OTHER
    with pytest.raises(ValueError, match="unexpected"):
        CleanupResult.from_reply([1])
