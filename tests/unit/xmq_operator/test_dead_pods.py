from __future__ import annotations

from typing import Any

from xmq.contract import NodeLease
from xmq_operator.dead_pods import (
    Release,
    node_is_out_of_service,
    releases_for_deleted_pod,
    releases_for_restarted_container,
    restart_cutoff,
    sweep,
)
from xmq_operator.rollout import parse_time

STARTED = parse_time("2026-11-30T03:00:00Z") or 0.0


def _lease(node_id: str, uid: str, epoch: int = 1, started_at: float = STARTED) -> NodeLease:
    return NodeLease(
        node_id=node_id,
        pod_name=node_id.rpartition("-")[0],
        pod_uid=uid,
        address="10.0.0.1:7884",
        epoch=epoch,
        started_at=started_at,
    )


def _pod(
    name: str, uid: str, node: str = "n1", container: dict[str, Any] | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if container is not None:
        status["containerStatuses"] = [{"name": "broker", **container}]
    return {"metadata": {"name": name, "uid": uid}, "spec": {"nodeName": node}, "status": status}


def test_a_deleted_pod_releases_its_own_leases_and_leaseless_members_only() -> None:
    leases = [_lease("xmq-0-0", "u0", 3), _lease("xmq-0-1", "other"), _lease("xmq-1-0", "u1")]
    releases = releases_for_deleted_pod(
        "xmq-0", "u0", leases, {"xmq-0-0", "xmq-0-1", "xmq-0-2", "xmq-1-0"}, "pod deleted"
    )
    assert releases == [
        Release("xmq-0-0", "xmq-0", "u0", 3, "pod deleted"),
        Release("xmq-0-2", "xmq-0", "u0", None, "pod deleted"),
    ]


def test_restart_cutoff_comes_from_the_container_status() -> None:
    pod = _pod(
        "xmq-0",
        "u0",
        container={
            "restartCount": 1,
            "state": {"running": {"startedAt": "2026-11-30T03:00:30Z"}},
            "lastState": {"terminated": {"finishedAt": "2026-11-30T03:00:20Z"}},
        },
    )
    assert restart_cutoff(pod, "broker") == STARTED + 30
    assert (
        restart_cutoff(
            _pod(
                "xmq-0",
                "u0",
                container={
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-11-30T03:00:30Z"}},
                },
            ),
            "broker",
        )
        is None
    )


def test_only_leases_older_than_the_restart_are_released() -> None:
    pod = _pod(
        "xmq-0",
        "u0",
        container={"restartCount": 2, "state": {"running": {"startedAt": "2026-11-30T03:01:00Z"}}},
    )
    old = _lease("xmq-0-0", "u0", 4, STARTED)
    new = _lease("xmq-0-1", "u0", 5, STARTED + 61)
    releases = releases_for_restarted_container(pod, "broker", [old, new])
    assert releases == [Release("xmq-0-0", "xmq-0", "u0", 4, "container restarted")]


def test_sweep_finds_gone_replaced_and_node_lost_pods_but_not_unreachable_ones() -> None:
    leases = [
        _lease("gone-0", "u-gone"),
        _lease("swapped-0", "u-old"),
        _lease("nodeless-0", "u-nodeless"),
        _lease("tainted-0", "u-tainted"),
        _lease("unreachable-0", "u-unreachable"),
        _lease("healthy-0", "u-healthy"),
    ]
    pods = {
        "swapped": _pod("swapped", "u-new"),
        "nodeless": _pod("nodeless", "u-nodeless", node="deleted-node"),
        "tainted": _pod("tainted", "u-tainted", node="tainted-node"),
        "unreachable": _pod("unreachable", "u-unreachable", node="notready-node"),
        "healthy": _pod("healthy", "u-healthy"),
    }
    nodes: dict[str, dict[str, Any]] = {
        "n1": {"spec": {}},
        "tainted-node": {
            "spec": {
                "taints": [{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}]
            }
        },
        "notready-node": {
            "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
        },
    }
    reasons = {release.node_id: release.reason for release in sweep(leases, pods, nodes, "broker")}
    assert reasons == {
        "gone-0": "pod deleted",
        "swapped-0": "pod replaced",
        "nodeless-0": "node deleted",
        "tainted-0": "node out of service",
    }


def test_out_of_service_taint_detection() -> None:
    assert node_is_out_of_service(
        {"spec": {"taints": [{"key": "node.kubernetes.io/out-of-service"}]}}
    )
    assert not node_is_out_of_service(
        {"spec": {"taints": [{"key": "node.kubernetes.io/unreachable"}]}}
    )
    assert not node_is_out_of_service({})


def test_a_deleted_pod_releases_the_lease_of_every_worker() -> None:
    """With ``workers: 3`` a pod holds three leases (``<pod>-0..2``) under one pod UID."""
    workers = [_lease(f"xmq-0-{worker}", "u0", 10 + worker) for worker in range(3)]
    neighbour = _lease("xmq-1-0", "u1")
    members = {lease.node_id for lease in (*workers, neighbour)} | {"xmq-0-3"}
    releases = releases_for_deleted_pod("xmq-0", "u0", [*workers, neighbour], members, "gone")
    assert releases == [
        *(Release(f"xmq-0-{w}", "xmq-0", "u0", 10 + w, "gone") for w in range(3)),
        Release("xmq-0-3", "xmq-0", "u0", None, "gone"),
    ]


def test_sweep_and_container_restart_release_every_worker_of_the_pod() -> None:
    workers = [_lease(f"xmq-0-{worker}", "u0", 1) for worker in range(4)]
    assert [r.node_id for r in sweep(workers, {}, {}, "broker")] == [
        f"xmq-0-{worker}" for worker in range(4)
    ]
    restarted = _pod(
        "xmq-0",
        "u0",
        container={"restartCount": 1, "state": {"running": {"startedAt": "2026-11-30T03:01:00Z"}}},
    )
    # Worker 2 was restarted by the pod's supervisor after the container restart: it is
    # the live run and keeps its lease; the three others belong to the dead container run.
    workers[2] = _lease("xmq-0-2", "u0", 2, STARTED + 70)
    released = releases_for_restarted_container(restarted, "broker", workers)
    assert [release.node_id for release in released] == ["xmq-0-0", "xmq-0-1", "xmq-0-3"]


def test_only_leases_of_the_clusters_own_statefulset_are_swept() -> None:
    from xmq_operator.dead_pods import leases_of_statefulset

    leases = [_lease("xmq-0-0", "u0"), _lease("xmq-other-1-0", "u1"), _lease("xmq-12-1", "u2")]
    own = leases_of_statefulset(leases, "xmq")
    assert [lease.node_id for lease in own] == ["xmq-0-0", "xmq-12-1"]
