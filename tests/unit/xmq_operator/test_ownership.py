from __future__ import annotations

from typing import Any

from xmq_operator.ownership import ChildWatch, controller_owner


def _child(uid: str, generation: int | None = None, owner: str = "prod") -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "uid": uid,
        "ownerReferences": [
            {
                "apiVersion": "xmq.io/v1alpha1",
                "kind": "XmqCluster",
                "name": owner,
                "controller": True,
            }
        ],
    }
    if generation is not None:
        metadata["generation"] = generation
    return {"metadata": metadata}


def test_the_controlling_xmqcluster_is_the_owner() -> None:
    assert controller_owner(_child("a"), "xmq.io/v1alpha1", "XmqCluster") == "prod"
    assert controller_owner(_child("a"), "apps/v1", "Deployment") is None
    assert controller_owner({"metadata": {}}, "xmq.io/v1alpha1", "XmqCluster") is None


def test_status_updates_are_no_drift_but_spec_edits_and_deletions_are() -> None:
    watch = ChildWatch()
    assert not watch.drifted("ADDED", _child("sts", generation=3))  # first sight
    assert not watch.drifted("MODIFIED", _child("sts", generation=3))  # status only
    assert watch.drifted("MODIFIED", _child("sts", generation=4))  # scaled by hand
    assert watch.drifted("DELETED", _child("sts", generation=4))


def test_objects_without_generation_drift_on_any_modification() -> None:
    watch = ChildWatch()
    assert not watch.drifted("ADDED", _child("svc"))
    assert watch.drifted("MODIFIED", _child("svc"))
    assert watch.drifted("DELETED", _child("svc"))
