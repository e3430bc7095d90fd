"""The operator against a real control plane (kwok nodes) and a real redis-server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from kopf.testing import KopfRunner

from scripts.k8s.cluster import ControlPlane, c5n_node
from tests.k8s.test_operator_harness import (
    cluster_manifest,
    condition,
    running_operator,
    secret_manifest,
    seed_node,
    wait_for,
)
from tests.support.redis_server import RedisServer, running_redis
from xmq.contract import ClusterKeys

CRD = Path(__file__).resolve().parents[2] / "crds" / "xmqcluster.yaml"
SELECTOR = "app.kubernetes.io/component=broker,app.kubernetes.io/instance={name}"


@pytest.fixture(scope="module")
def plane(k8s_cluster: ControlPlane) -> ControlPlane:
    k8s_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", CRD)
    k8s_cluster.kubectl(
        "wait", "--for=condition=Established", "crd/xmqclusters.xmq.io", "--timeout=60s"
    )
    return k8s_cluster


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with running_redis(decode_responses=True) as server:
        yield server


@pytest.fixture(scope="module")
def operator(plane: ControlPlane) -> Iterator[KopfRunner]:
    with running_operator(plane.kubeconfig) as runner:
        yield runner


@dataclass
class Cluster:
    plane: ControlPlane
    namespace: str
    name: str
    redis: redis.Redis
    keys: ClusterKeys

    def body(self) -> dict[str, Any]:
        result: dict[str, Any] = self.plane.kubectl_json(
            "get", "xmqcluster", self.name, "-n", self.namespace
        )
        return result

    def pods(self) -> list[dict[str, Any]]:
        selector = SELECTOR.format(name=self.name)
        items: list[dict[str, Any]] = self.plane.kubectl_json(
            "get", "pods", "-n", self.namespace, "-l", selector
        )["items"]
        return sorted(items, key=lambda pod: pod["metadata"]["name"])

    def pod(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.plane.kubectl_json("get", "pod", name, "-n", self.namespace)
        return result

    def patch_spec(self, spec: dict[str, Any]) -> None:
        self.plane.kubectl(
            "patch", "xmqcluster", self.name, "-n", self.namespace, "--type=merge",
            "-p", json.dumps({"spec": spec}),
        )  # fmt: skip

    def ready(self) -> bool:
        body = self.body()
        cond = condition(body, "Ready")
        pods = self.pods()
        return (
            cond is not None
            and cond["status"] == "True"
            and body["status"].get("readyReplicas") == body["spec"]["replicas"]
            and len(pods) == body["spec"]["replicas"]
            and all(_pod_ready(pod) for pod in pods)
        )

    def config_map(self) -> str:
        """The revisioned ConfigMap the StatefulSet's pods mount."""
        sts = self.plane.kubectl_json("get", "statefulset", self.name, "-n", self.namespace)
        volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
        name: str = volumes["config"]["configMap"]["name"]
        return name

    def events(self, reason: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.plane.kubectl_json(
            "get", "events", "-n", self.namespace,
            "--field-selector", f"reason={reason},involvedObject.name={self.name}",
        )["items"]  # fmt: skip
        return items


def _pod_ready(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond["type"] == "Ready":
            return bool(cond["status"] == "True")
    return False


def _make_cluster(
    plane: ControlPlane,
    namespace: str,
    server: RedisServer,
    name: str = "xmq",
    **spec: Any,
) -> Cluster:
    client = server.client()
    plane.apply(secret_manifest("redis", namespace, {"url": server.url}), namespace=namespace)
    plane.apply(cluster_manifest(name, namespace, **spec), namespace=namespace)
    return Cluster(plane, namespace, name, client, ClusterKeys(f"{namespace}.{name}"))


@pytest.fixture
def cluster(
    plane: ControlPlane, k8s_namespace: str, redis_server: RedisServer, operator: KopfRunner
) -> Iterator[Cluster]:
    made = _make_cluster(plane, k8s_namespace, redis_server)
    wait_for(made.ready, 120, "the XmqCluster to become Ready")
    yield made
    made.redis.close()


def test_a_cluster_runs_four_pods_one_per_c5n_node_and_goes_ready(cluster: Cluster) -> None:
    pods = cluster.pods()
    assert [pod["metadata"]["name"] for pod in pods] == ["xmq-0", "xmq-1", "xmq-2", "xmq-3"]
    nodes = {
        node["metadata"]["name"]: node
        for node in cluster.plane.kubectl_json("get", "nodes")["items"]
    }
    placed = [pod["spec"]["nodeName"] for pod in pods]
    assert len(set(placed)) == 4, placed
    for node_name in placed:
        labels = nodes[node_name]["metadata"]["labels"]
        assert labels["node.kubernetes.io/instance-type"].startswith("c5n."), node_name
    assert all(pod["status"]["phase"] == "Running" for pod in pods)

    body = cluster.body()
    for kind in ("Ready", "Progressing", "Degraded"):
        cond = condition(body, kind)
        assert cond is not None, kind
        assert cond["observedGeneration"] == body["metadata"]["generation"]
        assert cond["lastTransitionTime"]
    assert condition(body, "Progressing")["status"] == "False"  # type: ignore[index]
    assert condition(body, "Degraded")["status"] == "False"  # type: ignore[index]
    assert body["status"]["updatedReplicas"] == 4
    assert body["status"]["configHash"]

    sts = cluster.plane.kubectl_json("get", "statefulset", "xmq", "-n", cluster.namespace)
    assert sts["spec"]["updateStrategy"]["type"] == "OnDelete"
    config_map = cluster.config_map()
    assert config_map.startswith("xmq-config-")
    assert cluster.plane.kubectl_json("get", "configmap", config_map, "-n", cluster.namespace)[
        "immutable"
    ]
    for kind, name in (
        ("configmap", config_map),
        ("service", "xmq"),
        ("service", "xmq-peers"),
        ("poddisruptionbudget", "xmq"),
        ("statefulset", "xmq"),
    ):
        child = cluster.plane.kubectl_json("get", kind, name, "-n", cluster.namespace)
        (owner,) = child["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"]) == ("XmqCluster", body["metadata"]["uid"])


def test_reconciling_again_changes_nothing(cluster: Cluster) -> None:
    def versions() -> dict[str, str]:
        found = {}
        children = (
            ("configmap", cluster.config_map()),
            ("service", "xmq"),
            ("statefulset", "xmq"),
        )
        for kind, name in children:
            child = cluster.plane.kubectl_json("get", kind, name, "-n", cluster.namespace)
            found[kind + "/" + name] = child["metadata"]["resourceVersion"]
        return found

    before = versions()
    cluster.plane.kubectl(
        "annotate", "xmqcluster", cluster.name, "-n", cluster.namespace, "example.com/poke=1"
    )

    def handled() -> bool:
        annotations = cluster.body()["metadata"].get("annotations") or {}
        return "example.com/poke" in annotations.get("kopf.xmq.io/last-handled-configuration", "")

    wait_for(handled, 30, "the update handler to have re-applied every child")
    assert versions() == before


def test_members_reported_alive_come_from_redis_leases(cluster: Cluster) -> None:
    pod = cluster.pod("xmq-0")
    seed_node(cluster.redis, cluster.keys, pod, 0, [])
    wait_for(
        lambda: cluster.body()["status"].get("members") == ["xmq-0-0"],
        30,
        "status.members to list the seeded node",
    )


def test_a_config_edit_rolls_pods_one_at_a_time_highest_ordinal_first(cluster: Cluster) -> None:
    old_uids = {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in cluster.pods()}
    old_hash = cluster.body()["status"]["templateHash"]
    old_config_map = cluster.config_map()
    cluster.patch_spec({"config": {"mqtt": {"receive_maximum": 100}}})

    replaced: list[str] = []
    worst_unavailable = 0
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pods = cluster.pods()
        available = [pod for pod in pods if _pod_ready(pod)]
        worst_unavailable = max(worst_unavailable, 4 - len(available))
        for pod in pods:
            name = pod["metadata"]["name"]
            if pod["metadata"]["uid"] != old_uids[name] and name not in replaced:
                replaced.append(name)
        body = cluster.body()
        progressing = condition(body, "Progressing")
        if (
            len(replaced) == 4
            and body["status"].get("templateHash") != old_hash
            and body["status"].get("updatedReplicas") == 4
            and progressing is not None
            and progressing["status"] == "False"
            and len(available) == 4
        ):
            break
        time.sleep(0.2)
    assert replaced == ["xmq-3", "xmq-2", "xmq-1", "xmq-0"]
    assert worst_unavailable <= 1
    hashes = {pod["metadata"]["annotations"]["xmq.io/template-hash"] for pod in cluster.pods()}
    assert hashes == {cluster.body()["status"]["templateHash"]}
    assert len(cluster.events("RollingPod")) >= 4
    # The previous revision stays (immutable), ready for a roll back by reverting the spec.
    assert cluster.config_map() != old_config_map
    kept = cluster.plane.kubectl_json("get", "configmap", old_config_map, "-n", cluster.namespace)
    assert kept["immutable"] is True


def test_a_deleted_pods_leases_are_released_and_a_live_pods_are_not(cluster: Cluster) -> None:
    victim, survivor = cluster.pod("xmq-1"), cluster.pod("xmq-2")
    dead = [
        seed_node(cluster.redis, cluster.keys, victim, w, [f"v{w}-a", f"v{w}-b"]) for w in (0, 1)
    ]
    live = seed_node(cluster.redis, cluster.keys, survivor, 0, ["s-a"])

    cluster.plane.kubectl("delete", "pod", "xmq-1", "-n", cluster.namespace, "--wait=false")
    wait_for(
        lambda: not any(cluster.redis.exists(cluster.keys.lease(lease.node_id)) for lease in dead),
        20,
        "the deleted pod's leases to be released",
    )
    assert cluster.redis.smembers(cluster.keys.orphaned_sessions()) == {
        "v0-a",
        "v0-b",
        "v1-a",
        "v1-b",
    }
    assert cluster.redis.get(cluster.keys.lease(live.node_id)) == live.to_json()
    assert cluster.redis.smembers(cluster.keys.node_sessions(live.node_id)) == {"s-a"}
    wait_for(lambda: cluster.events("DeadPodCleanup"), 10, "a DeadPodCleanup event")

    # The replacement pod (same name, new UID) registers its node: never released.
    def replacement_pod() -> dict[str, Any] | None:
        for pod in cluster.pods():
            meta = pod["metadata"]
            if meta["name"] == "xmq-1" and meta["uid"] != victim["metadata"]["uid"]:
                return pod
        return None

    replacement = wait_for(replacement_pod, 60, "the replacement pod")
    fresh = seed_node(cluster.redis, cluster.keys, replacement, 0, ["r-a"])
    time.sleep(12)  # one full sweeper period
    assert cluster.redis.get(cluster.keys.lease(fresh.node_id)) == fresh.to_json()
    assert cluster.redis.get(cluster.keys.lease(live.node_id)) == live.to_json()


def test_node_not_ready_keeps_leases_and_out_of_service_releases_them(cluster: Cluster) -> None:
    pod = cluster.pod("xmq-3")
    node = pod["spec"]["nodeName"]
    lease = seed_node(cluster.redis, cluster.keys, pod, 0, ["n-a"])
    cluster.plane.stop_heartbeat(node)
    try:
        cluster.plane.wait_node_ready(node, ready=False, timeout=90)
        time.sleep(15)  # sweeper and node events have had their chance
        assert cluster.redis.get(cluster.keys.lease(lease.node_id)) == lease.to_json()

        cluster.plane.kubectl(
            "taint", "node", node, "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"
        )
        wait_for(
            lambda: not cluster.redis.exists(cluster.keys.lease(lease.node_id)),
            20,
            "the out-of-service node's pod leases to be released",
        )
        assert "n-a" in cluster.redis.smembers(cluster.keys.orphaned_sessions())
    finally:
        cluster.plane.kubectl(
            "taint", "node", node, "node.kubernetes.io/out-of-service-", check=False
        )
        cluster.plane.resume_heartbeat(node)
        cluster.plane.wait_node_ready(node, timeout=90)


def test_a_deleted_node_releases_its_pods_leases(cluster: Cluster) -> None:
    pod = cluster.pod("xmq-0")
    node_name = pod["spec"]["nodeName"]
    node = next(n for n in cluster.plane.nodes if n.name == node_name)
    lease = seed_node(cluster.redis, cluster.keys, pod, 0, ["d-a"])
    cluster.plane.kubectl("delete", "node", node_name, "--wait=false")
    try:
        wait_for(
            lambda: not cluster.redis.exists(cluster.keys.lease(lease.node_id)),
            20,
            "the deleted node's pod leases to be released",
        )
        assert "d-a" in cluster.redis.smembers(cluster.keys.orphaned_sessions())
    finally:
        cluster.plane.nodes.remove(node)
        cluster.plane.add_nodes([c5n_node(node.name, node.zone)])


def test_pausing_stops_reconciliation(cluster: Cluster) -> None:
    sts_before = cluster.plane.kubectl_json("get", "statefulset", "xmq", "-n", cluster.namespace)
    cluster.plane.kubectl(
        "annotate", "xmqcluster", cluster.name, "-n", cluster.namespace, "xmq.io/paused=true"
    )
    wait_for(
        lambda: (condition(cluster.body(), "ReconciliationPaused") or {}).get("status") == "True",
        30,
        "ReconciliationPaused=True",
    )
    cluster.patch_spec({"config": {"mqtt": {"receive_maximum": 200}}})
    time.sleep(5)
    sts_after = cluster.plane.kubectl_json("get", "statefulset", "xmq", "-n", cluster.namespace)
    assert sts_after["spec"]["template"] == sts_before["spec"]["template"]
    cluster.plane.kubectl(
        "annotate", "xmqcluster", cluster.name, "-n", cluster.namespace, "xmq.io/paused-"
    )
    wait_for(
        lambda: (condition(cluster.body(), "ReconciliationPaused") or {}).get("status") == "False",
        30,
        "ReconciliationPaused=False",
    )


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ("missing-secret", "MissingSecret"),
        ("invalid-config", "InvalidConfig"),
        ("redis-down", "RedisUnreachable"),
    ],
    ids=["missing-secret", "invalid-config", "redis-down"],
)
def test_problems_show_as_degraded_with_a_reason(
    plane: ControlPlane,
    k8s_namespace: str,
    redis_server: RedisServer,
    operator: KopfRunner,
    setup: str,
    reason: str,
) -> None:
    spec: dict[str, Any] = {"replicas": 1}
    if setup == "missing-secret":
        spec["redis"] = {"secretRef": {"name": "no-such-secret", "key": "url"}}
    if setup == "invalid-config":
        spec["config"] = {"mqtt": {"max_packet_size": 1}}
    made = _make_cluster(plane, k8s_namespace, redis_server, **spec)
    if setup == "redis-down":
        dead_url = "redis://127.0.0.1:1/0"
        plane.apply(
            secret_manifest("redis", k8s_namespace, {"url": dead_url}), namespace=k8s_namespace
        )

    def degraded() -> dict[str, Any] | None:
        cond = condition(made.body(), "Degraded")
        return cond if cond is not None and cond["status"] == "True" else None

    cond = wait_for(degraded, 60, f"Degraded with reason {reason}")
    assert cond["reason"] == reason, cond
    assert cond["message"]
    ready = condition(made.body(), "Ready")
    assert ready is not None
    assert ready["status"] == "False"
    made.redis.close()


def test_scaling_through_the_scale_subresource(cluster: Cluster) -> None:
    cluster.plane.kubectl(
        "scale", "xmqcluster", cluster.name, "-n", cluster.namespace, "--replicas=5"
    )
    wait_for(cluster.ready, 90, "five Ready pods after scaling up")
    sts = cluster.plane.kubectl_json("get", "statefulset", "xmq", "-n", cluster.namespace)
    assert sts["spec"]["replicas"] == 5
    body = cluster.body()
    assert body["status"]["selector"] == (
        "app.kubernetes.io/component=broker,app.kubernetes.io/instance=xmq,"
        "app.kubernetes.io/name=xmq"
    )
    path = f"/apis/xmq.io/v1alpha1/namespaces/{cluster.namespace}/xmqclusters/xmq/scale"
    scale = json.loads(cluster.plane.kubectl("get", "--raw", path).stdout)
    assert scale["spec"]["replicas"] == 5
    assert len({pod["spec"]["nodeName"] for pod in cluster.pods()}) == 5


def test_a_restarted_container_releases_only_the_leases_of_its_dead_run(cluster: Cluster) -> None:
    pod = cluster.pod("xmq-2")
    old_run = seed_node(cluster.redis, cluster.keys, pod, 0, ["old-a"])
    restarted_at = time.time() + 2
    new_run = seed_node(cluster.redis, cluster.keys, pod, 1, ["new-a"])
    new_run = new_run.model_copy(update={"started_at": restarted_at + 1})
    cluster.redis.set(cluster.keys.lease(new_run.node_id), new_run.to_json(), px=600_000)

    def stamp(moment: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moment))

    status = {
        "name": "broker",
        "ready": True,
        "started": True,
        "restartCount": 1,
        "image": "xmq:0.1.0",
        "imageID": "",
        "state": {"running": {"startedAt": stamp(restarted_at)}},
        "lastState": {
            "terminated": {
                "exitCode": 137,
                "reason": "Error",
                "startedAt": stamp(old_run.started_at - 60),
                "finishedAt": stamp(restarted_at - 1),
            }
        },
    }
    cluster.plane.kubectl(
        "patch", "pod", "xmq-2", "-n", cluster.namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": {"containerStatuses": [status]}}),
    )  # fmt: skip
    wait_for(
        lambda: not cluster.redis.exists(cluster.keys.lease(old_run.node_id)),
        20,
        "the dead run's lease to be released",
    )
    assert cluster.redis.get(cluster.keys.lease(new_run.node_id)) == new_run.to_json()
    assert cluster.redis.smembers(cluster.keys.orphaned_sessions()) == {"old-a"}
