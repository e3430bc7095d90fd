"""The operator repairs drift, tells the truth in its status and disrupts one pod at a time.

Real control plane (kwok nodes), real redis-server on loopback, the operator in-process.
"""

from __future__ import annotations

import time
from typing import Any

from kopf.testing import KopfRunner

from scripts.k8s.cluster import ControlPlane, KubectlError
from tests.k8s import test_operator_cluster as base
from tests.k8s.test_operator_cluster import Cluster, _make_cluster, _pod_ready
from tests.k8s.test_operator_harness import condition, seed_node, wait_for
from tests.support.redis_server import RedisServer

# The fixtures of the operator's cluster tests (module-scoped ones start anew for this module).
plane = base.plane
redis_server = base.redis_server
operator = base.operator
cluster = base.cluster


def _status_of(made: Cluster, kind: str) -> dict[str, Any]:
    return condition(made.body(), kind) or {}


def _degraded(made: Cluster, reason: str, timeout: float = 60) -> dict[str, Any]:
    """Wait for ``Degraded=True`` with ``reason``; the condition."""

    def found() -> dict[str, Any] | None:
        cond = _status_of(made, "Degraded")
        return cond if cond.get("status") == "True" and cond.get("reason") == reason else None

    return wait_for(found, timeout, f"Degraded {reason}")


def _warnings(made: Cluster, reason: str) -> list[dict[str, Any]]:
    return [event for event in made.events(reason) if event.get("type") == "Warning"]


def _exists(plane: ControlPlane, kind: str, name: str, namespace: str) -> bool:
    result = plane.kubectl("get", kind, name, "-n", namespace, "-o", "name", check=False)
    return result.returncode == 0


def test_deleted_children_and_a_hand_scaled_statefulset_are_restored(cluster: Cluster) -> None:
    ns = cluster.namespace
    cluster.plane.kubectl("scale", "statefulset", "xmq", "-n", ns, "--replicas=2")
    cluster.plane.kubectl("delete", "service", "xmq", "-n", ns, "--wait=false")
    cluster.plane.kubectl("delete", "poddisruptionbudget", "xmq", "-n", ns, "--wait=false")
    started = time.monotonic()
    claimed_rolls: list[str] = []

    def repaired() -> bool:
        progressing = _status_of(cluster, "Progressing")
        if progressing.get("reason") == "RollingUpdate":
            claimed_rolls.append(progressing.get("message", ""))
        sts = cluster.plane.kubectl_json("get", "statefulset", "xmq", "-n", ns)
        return (
            sts["spec"]["replicas"] == 4
            and _exists(cluster.plane, "service", "xmq", ns)
            and _exists(cluster.plane, "poddisruptionbudget", "xmq", ns)
        )

    wait_for(repaired, 20, "the Service, the PDB and 4 StatefulSet replicas to be restored")
    assert time.monotonic() - started < 20
    wait_for(cluster.ready, 90, "four Ready pods again")
    assert claimed_rolls == [], "status claimed a roll while only drift was being repaired"


def test_a_second_cluster_on_the_same_redis_namespace_touches_nothing(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    ns = cluster.namespace
    live = seed_node(cluster.redis, cluster.keys, cluster.pod("xmq-0"), 0, ["live-a"])
    # Same key namespace as the first cluster (its default is <namespace>.<name>).
    intruder = _make_cluster(
        cluster.plane,
        ns,
        redis_server,
        name="intruder",
        replicas=1,
        config={"cluster": {"name": f"{ns}.xmq"}},
    )

    cond = _degraded(intruder, "RedisNamespaceInUse", 30)
    assert cluster.body()["metadata"]["uid"] in cond["message"]
    assert _status_of(intruder, "Ready")["status"] == "False"
    wait_for(lambda: _warnings(intruder, "RedisNamespaceInUse"), 10, "a Warning Event")
    assert not _exists(cluster.plane, "statefulset", "intruder", ns)
    assert not _exists(cluster.plane, "service", "intruder", ns)
    time.sleep(11)  # a full resync/sweeper period of the second cluster
    assert cluster.redis.get(cluster.keys.lease(live.node_id)) == live.to_json()
    assert cluster.redis.get(cluster.keys.cluster_uid()) == cluster.body()["metadata"]["uid"]
    assert _status_of(cluster, "Degraded")["status"] == "False"
    intruder.redis.close()


def test_an_unschedulable_instance_type_is_degraded_with_the_schedulers_reason(
    plane: ControlPlane, k8s_namespace: str, redis_server: RedisServer, operator: KopfRunner
) -> None:
    made = _make_cluster(
        plane,
        k8s_namespace,
        redis_server,
        replicas=1,
        placement={"instanceTypes": ["x9.nonexistent"]},
    )

    cond = _degraded(made, "Unschedulable", 60)
    assert "xmq-0 cannot be scheduled" in cond["message"]
    assert "node affinity" in cond["message"] or "nodes are available" in cond["message"]
    assert _status_of(made, "Progressing")["reason"] == "Blocked"
    assert _status_of(made, "Ready")["status"] == "False"
    (warning, *_) = wait_for(lambda: _warnings(made, "Unschedulable"), 10, "a Warning Event")
    assert "cannot be scheduled" in warning["message"]
    made.redis.close()


def test_pods_refused_at_admission_are_degraded_with_the_refusal(
    plane: ControlPlane, k8s_namespace: str, redis_server: RedisServer, operator: KopfRunner
) -> None:
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-pods", "namespace": k8s_namespace},
        "spec": {"hard": {"pods": "0"}},
    }
    plane.apply(quota, namespace=k8s_namespace)
    made = _make_cluster(plane, k8s_namespace, redis_server, replicas=1)

    cond = _degraded(made, "PodCreationRefused", 60)
    assert "forbidden" in cond["message"] and "quota" in cond["message"]
    wait_for(lambda: _warnings(made, "PodCreationRefused"), 10, "a Warning Event")
    made.redis.close()


def test_an_invalid_quantity_is_refused_before_anything_is_created(
    plane: ControlPlane, k8s_namespace: str, redis_server: RedisServer, operator: KopfRunner
) -> None:
    try:
        made = _make_cluster(
            plane, k8s_namespace, redis_server, resources={"requests": {"cpu": "lots"}}
        )
    except KubectlError as exc:  # the CRD's own validation refused it: as good
        assert "cpu" in str(exc) or "quantity" in str(exc), exc
        return

    cond = _degraded(made, "InvalidSpec", 30)
    assert "resources.requests" in cond["message"] and "lots" in cond["message"]
    wait_for(lambda: _warnings(made, "InvalidSpec"), 10, "a Warning Event")
    time.sleep(2)
    for kind in ("statefulset", "service", "configmap", "poddisruptionbudget"):
        listed = plane.kubectl_json(
            "get", kind, "-n", k8s_namespace, "-l", "app.kubernetes.io/instance=xmq"
        )
        assert listed["items"] == [], kind
    made.redis.close()


def test_an_invalid_config_on_a_healthy_cluster_keeps_it_ready(cluster: Cluster) -> None:
    uids = {pod["metadata"]["uid"] for pod in cluster.pods()}
    generation = cluster.body()["metadata"]["generation"]
    cluster.patch_spec({"config": {"mqtt": {"max_packet_size": 1}}})

    cond = _degraded(cluster, "InvalidConfig", 30)
    assert "max_packet_size" in cond["message"]
    body = cluster.body()
    assert cond["observedGeneration"] == body["metadata"]["generation"]
    ready = condition(body, "Ready") or {}
    assert ready["status"] == "True", ready
    assert ready["observedGeneration"] == generation
    assert body["status"]["observedGeneration"] == generation
    assert body["status"]["updatedReplicas"] == 4
    assert {pod["metadata"]["uid"] for pod in cluster.pods()} == uids
    wait_for(lambda: _warnings(cluster, "InvalidConfig"), 10, "a Warning Event")


def test_a_paused_spec_change_is_not_reported_as_applied(cluster: Cluster) -> None:
    ns = cluster.namespace
    template = cluster.plane.kubectl_json("get", "statefulset", "xmq", "-n", ns)["spec"]["template"]
    generation = cluster.body()["metadata"]["generation"]
    cluster.plane.kubectl("annotate", "xmqcluster", "xmq", "-n", ns, "xmq.io/paused=true")
    cluster.patch_spec({"config": {"mqtt": {"receive_maximum": 200}}})

    def paused_and_seen() -> bool:
        body = cluster.body()
        paused = condition(body, "ReconciliationPaused") or {}
        return (
            paused.get("status") == "True"
            and paused.get("observedGeneration") == body["metadata"]["generation"]
        )

    wait_for(paused_and_seen, 30, "ReconciliationPaused=True for the new generation")
    time.sleep(3)
    body = cluster.body()
    assert body["metadata"]["generation"] > generation
    assert body["status"]["observedGeneration"] == generation
    ready = condition(body, "Ready") or {}
    assert ready["status"] == "True" and ready["observedGeneration"] == generation
    assert "reconciliation is paused" in ready["message"]
    assert (condition(body, "Progressing") or {})["reason"] == "ReconciliationPaused"
    sts = cluster.plane.kubectl_json("get", "statefulset", "xmq", "-n", ns)
    assert sts["spec"]["template"] == template

    cluster.plane.kubectl("annotate", "xmqcluster", "xmq", "-n", ns, "xmq.io/paused-")
    wait_for(
        lambda: (
            cluster.body()["status"]["observedGeneration"]
            == cluster.body()["metadata"]["generation"]
        ),
        30,
        "the spec to be applied once resumed",
    )


def test_scale_in_evicts_one_pod_at_a_time_and_respects_the_pdb(cluster: Cluster) -> None:
    ns = cluster.namespace
    cluster.patch_spec({"podDisruptionBudget": {"maxUnavailable": 0}})
    wait_for(
        lambda: (
            cluster.plane.kubectl_json("get", "pdb", "xmq", "-n", ns)
            .get("status", {})
            .get("expectedPods")
            == 4
            and cluster.plane.kubectl_json("get", "pdb", "xmq", "-n", ns)["spec"]["maxUnavailable"]
            == 0
        ),
        30,
        "a PDB allowing no disruption",
    )
    cluster.patch_spec({"replicas": 2})

    def refused() -> bool:
        rollout = cluster.body()["status"].get("rollout") or {}
        return "PodDisruptionBudget refuses evicting xmq-3" in (rollout.get("reason") or "")

    wait_for(refused, 30, "the scale-in to wait for the PDB")
    pods = cluster.pods()
    assert len(pods) == 4 and not any(p["metadata"].get("deletionTimestamp") for p in pods)
    assert (
        cluster.plane.kubectl_json("get", "statefulset", "xmq", "-n", ns)["spec"]["replicas"] == 4
    )

    cluster.patch_spec({"podDisruptionBudget": {"maxUnavailable": 1}})
    gone: list[str] = []
    most_terminating = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pods = cluster.pods()
        names = {pod["metadata"]["name"] for pod in pods}
        most_terminating = max(
            most_terminating, sum(1 for p in pods if p["metadata"].get("deletionTimestamp"))
        )
        for name in ("xmq-3", "xmq-2"):
            if name not in names and name not in gone:
                gone.append(name)
        if names == {"xmq-0", "xmq-1"} and all(_pod_ready(pod) for pod in pods):
            break
        time.sleep(0.2)
    assert gone == ["xmq-3", "xmq-2"]
    assert most_terminating <= 1
    evictions = [e["message"] for e in cluster.events("RollingPod") if "scale-in" in e["message"]]
    assert len(evictions) == 2, evictions
    wait_for(
        lambda: _status_of(cluster, "Progressing").get("reason") == "Complete",
        30,
        "Progressing Complete after the scale-in",
    )
