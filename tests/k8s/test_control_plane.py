"""The Kubernetes test control plane is real: API, scheduler, controllers and kwok all work.

What these tests observe is what the operator tests rely on (docs/testing-k8s.md).
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kopf.testing import KopfRunner

from scripts.k8s.cluster import (
    DEFAULT_NODES,
    INSTANCE_TYPE,
    ZONE,
    ControlPlane,
    c5n_node,
    versions,
)

C5N = "c5n.2xlarge"
Obj = dict[str, Any]


def wait_for(
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    state: Callable[[], object] | None = None,
) -> None:
    """Poll ``predicate`` every second; on timeout fail with ``state()`` for diagnosis."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            seen = f"; state: {state()!r}" if state is not None else ""
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}{seen}")
        time.sleep(1.0)


def pod_states(k8s: ControlPlane, ns: str) -> Callable[[], object]:
    """What the pods of ``ns`` look like (for failure messages)."""

    def describe() -> object:
        return [
            (
                p["metadata"]["name"],
                p["metadata"]["uid"][:8],
                p["spec"].get("nodeName"),
                p.get("status", {}).get("phase"),
                condition(p, "Ready"),
                p["metadata"].get("deletionTimestamp"),
            )
            for p in k8s.kubectl_json("get", "pods", "-n", ns)["items"]
        ]

    return describe


def pods(k8s: ControlPlane, ns: str, selector: str) -> list[Obj]:
    items: list[Obj] = k8s.kubectl_json("get", "pods", "-n", ns, "-l", selector)["items"]
    return items


def condition(obj: Obj, kind: str) -> str | None:
    for c in obj.get("status", {}).get("conditions") or []:
        if c["type"] == kind:
            return str(c["status"])
    return None


def running_ready(pod: Obj) -> bool:
    return bool(
        pod.get("status", {}).get("phase") == "Running"
        and condition(pod, "Ready") == "True"
        and "deletionTimestamp" not in pod["metadata"]
    )


def node_labels(k8s: ControlPlane) -> dict[str, dict[str, str]]:
    nodes = k8s.kubectl_json("get", "nodes")["items"]
    return {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}


def statefulset(
    name: str, replicas: int, affinity: Obj, tolerations: list[Obj] | None = None
) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "affinity": affinity,
                    "tolerations": tolerations or [],
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {"name": "broker", "image": "xmq:test", "ports": [{"containerPort": 1883}]}
                    ],
                },
            },
        },
    }


def pinned_affinity(key: str, values: list[str], *, one_per_node: bool, app: str) -> Obj:
    affinity: Obj = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
                ]
            }
        }
    }
    if one_per_node:
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": app}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    return affinity


# --------------------------------------------------------------------------------- API


def test_api_server_answers_with_the_pinned_version(k8s_cluster: ControlPlane) -> None:
    version = json.loads(k8s_cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == versions()["KUBERNETES_VERSION"]
    assert version["clientVersion"]["gitVersion"] == versions()["KUBERNETES_VERSION"]

    ctx = ssl.create_default_context(cafile=str(k8s_cluster.ca_file))
    req = urllib.request.Request(
        f"{k8s_cluster.api_url}/readyz", headers={"Authorization": f"Bearer {k8s_cluster.token}"}
    )
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        assert resp.read() == b"ok"
    # Authentication is real: a wrong token is refused.
    bad = urllib.request.Request(
        f"{k8s_cluster.api_url}/api/v1/namespaces", headers={"Authorization": "Bearer nope"}
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(bad, context=ctx, timeout=10)
    assert err.value.code == 401
    err.value.close()
    # The API server listens on loopback only.
    assert k8s_cluster.api_url.startswith("https://127.0.0.1:")


def test_fake_nodes_are_an_eks_c5n_node_group_plus_other_types(k8s_cluster: ControlPlane) -> None:
    labels = node_labels(k8s_cluster)
    for node in DEFAULT_NODES:
        assert node.name in labels
        assert k8s_cluster.node_ready(node.name) is True
    c5n = [n for n, lab in labels.items() if lab.get(INSTANCE_TYPE) == C5N]
    other = [n for n, lab in labels.items() if lab.get(INSTANCE_TYPE) not in (None, C5N)]
    assert len(c5n) >= 4
    assert len(other) >= 2
    assert {labels[n][ZONE] for n in c5n} >= {"us-east-1a", "us-east-1b"}
    assert all(labels[n]["eks.amazonaws.com/nodegroup"] == "xmq-c5n" for n in c5n)
    # kwok holds each node's lease in kube-node-lease like a kubelet would.
    leases = k8s_cluster.kubectl_json("get", "leases", "-n", "kube-node-lease")["items"]
    assert {lease["metadata"]["name"] for lease in leases} >= {n.name for n in DEFAULT_NODES}


def test_controller_manager_runs_its_controllers(k8s_cluster: ControlPlane) -> None:
    # The service-account and root-CA publisher controllers fill every namespace.
    def default_sa_and_ca() -> bool:
        sa = k8s_cluster.kubectl("get", "serviceaccount", "default", check=False)
        ca = k8s_cluster.kubectl("get", "configmap", "kube-root-ca.crt", check=False)
        return sa.returncode == 0 and ca.returncode == 0

    wait_for(default_sa_and_ca, 60, "default ServiceAccount and kube-root-ca.crt")
    # TokenRequest works (the operator tests run the operator as the chart's ServiceAccount).
    token = k8s_cluster.kubectl("create", "token", "default", "--duration=10m").stdout.strip()
    assert token.count(".") == 2


# ---------------------------------------------------------------- clients


def test_python_kubernetes_client_and_kopf_talk_to_it(
    k8s_cluster: ControlPlane,
    k8s_namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(k8s_cluster.kubeconfig)
    )
    try:
        core = kubernetes.client.CoreV1Api(api)
        names = {n.metadata.name for n in core.list_node().items if n.metadata}
        assert {n.name for n in DEFAULT_NODES} <= names
        meta = kubernetes.client.V1ObjectMeta(name="probe", labels={"xmq.test/kopf": "yes"})
        core.create_namespaced_config_map(
            k8s_namespace, kubernetes.client.V1ConfigMap(metadata=meta)
        )
    finally:
        api.close()

    # A minimal kopf operator, run in-process the way the operator tests run theirs.
    operator = tmp_path / "probe_operator.py"
    operator.write_text(
        "import kopf\n"
        "@kopf.on.login()\n"  # kopf's own kubeconfig reader, which reads $KUBECONFIG now
        "def login(**kwargs):\n"
        "    return kopf.login_with_kubeconfig(**kwargs)\n"
        "@kopf.on.startup()\n"
        "def configure(settings: kopf.OperatorSettings, **_):\n"
        "    settings.posting.enabled = False\n"
        "@kopf.on.resume('configmaps', labels={'xmq.test/kopf': 'yes'})\n"
        "@kopf.on.create('configmaps', labels={'xmq.test/kopf': 'yes'})\n"
        "def seen(patch, **_):\n"
        "    patch['metadata'] = {'annotations': {'xmq.test/seen-by': 'kopf'}}\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(k8s_cluster.kubeconfig))

    def annotated() -> bool:
        cm = k8s_cluster.kubectl_json("get", "configmap", "probe", "-n", k8s_namespace)
        return bool(cm["metadata"].get("annotations", {}).get("xmq.test/seen-by") == "kopf")

    args = ["run", "--standalone", f"--namespace={k8s_namespace}", str(operator)]
    with KopfRunner(args, timeout=60) as runner:
        wait_for(annotated, 45, "kopf to annotate the ConfigMap")
    assert runner.exit_code == 0, runner.output
    assert runner.exception is None


# ---------------------------------------------------------------- scheduling


def test_statefulset_pinned_to_c5n_gets_one_ready_pod_per_c5n_node(
    k8s_cluster: ControlPlane, k8s_namespace: str
) -> None:
    ns = k8s_namespace
    affinity = pinned_affinity(INSTANCE_TYPE, [C5N], one_per_node=True, app="xmq")
    k8s_cluster.apply(statefulset("xmq", 4, affinity), namespace=ns)
    wait_for(
        lambda: sum(map(running_ready, pods(k8s_cluster, ns, "app=xmq"))) == 4,
        120,
        "4 Running+Ready pods",
        pod_states(k8s_cluster, ns),
    )
    labels = node_labels(k8s_cluster)
    placed = [p["spec"]["nodeName"] for p in pods(k8s_cluster, ns, "app=xmq")]
    assert len(set(placed)) == 4, placed  # one per node (anti-affinity)
    assert all(labels[n][INSTANCE_TYPE] == C5N for n in placed), placed
    for pod in pods(k8s_cluster, ns, "app=xmq"):
        assert pod["status"]["podIP"].startswith("10.244.")

    # The StatefulSet controller reports readiness like a real cluster's.
    wait_for(
        lambda: (
            k8s_cluster.kubectl_json("get", "sts", "xmq", "-n", ns)["status"].get("readyReplicas")
            == 4
        ),
        60,
        "sts readyReplicas=4",
    )
    # The garbage collector follows owner references: deleting the StatefulSet removes its pods.
    k8s_cluster.kubectl("delete", "sts", "xmq", "-n", ns, "--wait=false")
    wait_for(
        lambda: not pods(k8s_cluster, ns, "app=xmq"),
        90,
        "pods garbage-collected",
        pod_states(k8s_cluster, ns),
    )


def test_pods_pinned_to_another_type_avoid_c5n_and_impossible_ones_stay_pending(
    k8s_cluster: ControlPlane, k8s_namespace: str
) -> None:
    ns = k8s_namespace
    k8s_cluster.apply(
        statefulset(
            "other", 4, pinned_affinity(INSTANCE_TYPE, ["m5.large"], one_per_node=False, app="x")
        ),
        statefulset(
            "nowhere",
            1,
            pinned_affinity(INSTANCE_TYPE, ["p4d.24xlarge"], one_per_node=False, app="x"),
        ),
        namespace=ns,
    )
    wait_for(
        lambda: sum(map(running_ready, pods(k8s_cluster, ns, "app=other"))) == 4,
        120,
        "4 Running+Ready m5 pods",
        pod_states(k8s_cluster, ns),
    )
    labels = node_labels(k8s_cluster)
    placed = {p["spec"]["nodeName"] for p in pods(k8s_cluster, ns, "app=other")}
    assert all(labels[n][INSTANCE_TYPE] == "m5.large" for n in placed), placed

    def unschedulable() -> bool:
        found = pods(k8s_cluster, ns, "app=nowhere")
        return bool(found) and any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in found[0].get("status", {}).get("conditions") or []
        )

    wait_for(unschedulable, 60, "the impossible pod Unschedulable", pod_states(k8s_cluster, ns))
    assert "nodeName" not in pods(k8s_cluster, ns, "app=nowhere")[0]["spec"]


# ---------------------------------------------------------------- node failures


def test_deleting_a_node_removes_its_pods_and_the_statefulset_replaces_them(
    k8s_cluster: ControlPlane, k8s_namespace: str
) -> None:
    ns, pool = k8s_namespace, f"del-{uuid.uuid4().hex[:6]}"
    doomed, spare = f"c5n-{pool}-1", f"c5n-{pool}-2"
    k8s_cluster.add_nodes(
        [c5n_node(doomed, "us-east-1a", labels=(("xmq.test/pool", pool),))],
    )
    try:
        affinity = pinned_affinity("xmq.test/pool", [pool], one_per_node=True, app="victim")
        k8s_cluster.apply(statefulset("victim", 1, affinity), namespace=ns)
        wait_for(
            lambda: sum(map(running_ready, pods(k8s_cluster, ns, "app=victim"))) == 1,
            90,
            "victim-0 Running+Ready",
            pod_states(k8s_cluster, ns),
        )
        (before,) = pods(k8s_cluster, ns, "app=victim")
        assert before["spec"]["nodeName"] == doomed
        k8s_cluster.add_nodes([c5n_node(spare, "us-east-1b", labels=(("xmq.test/pool", pool),))])

        k8s_cluster.kubectl("delete", "node", doomed)

        # The pod GC controller deletes pods bound to a Node that no longer exists (after a
        # 40 s quarantine, checked every 20 s); the StatefulSet recreates victim-0 elsewhere.
        def replaced() -> bool:
            now = pods(k8s_cluster, ns, "app=victim")
            return (
                len(now) == 1
                and now[0]["metadata"]["uid"] != before["metadata"]["uid"]
                and running_ready(now[0])
            )

        wait_for(replaced, 150, "victim-0 replaced", pod_states(k8s_cluster, ns))
        (after,) = pods(k8s_cluster, ns, "app=victim")
        assert after["metadata"]["name"] == "victim-0"
        assert after["spec"]["nodeName"] == spare
    finally:
        k8s_cluster.kubectl("delete", "node", doomed, spare, "--ignore-not-found", "--wait=false")


def test_a_node_whose_heartbeat_stops_goes_not_ready_and_its_pods_stay_terminating(
    k8s_cluster: ControlPlane, k8s_namespace: str
) -> None:
    ns, pool = k8s_namespace, f"hb-{uuid.uuid4().hex[:6]}"
    node = f"c5n-{pool}"
    k8s_cluster.add_nodes([c5n_node(node, "us-east-1a", labels=(("xmq.test/pool", pool),))])
    try:
        # Short tolerations so the taint-based eviction happens within the test.
        tolerations = [
            {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3}
            for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
        ]
        affinity = pinned_affinity("xmq.test/pool", [pool], one_per_node=False, app="lost")
        k8s_cluster.apply(statefulset("lost", 1, affinity, tolerations), namespace=ns)
        wait_for(
            lambda: sum(map(running_ready, pods(k8s_cluster, ns, "app=lost"))) == 1,
            90,
            "lost-0 Running+Ready",
            pod_states(k8s_cluster, ns),
        )
        (before,) = pods(k8s_cluster, ns, "app=lost")

        k8s_cluster.stop_heartbeat(node)
        # --node-monitor-grace-period=30s after the last lease renewal (renewed every ~10 s).
        k8s_cluster.wait_node_ready(node, ready=False, timeout=90)
        node_obj = k8s_cluster.kubectl_json("get", "node", node)
        taints = {t["key"] for t in node_obj["spec"].get("taints") or []}
        assert "node.kubernetes.io/unreachable" in taints

        # The node controller marks the pod NotReady, then evicts it: with no kubelet to
        # confirm, it stays Terminating on the unreachable node - it is not gone.
        def terminating() -> bool:
            now = pods(k8s_cluster, ns, "app=lost")
            return bool(now) and "deletionTimestamp" in now[0]["metadata"]

        wait_for(terminating, 60, "lost-0 Terminating", pod_states(k8s_cluster, ns))
        time.sleep(5)
        (still,) = pods(k8s_cluster, ns, "app=lost")
        assert still["metadata"]["uid"] == before["metadata"]["uid"]
        assert "deletionTimestamp" in still["metadata"]
        assert condition(still, "Ready") == "False"

        # Heartbeat back: the node is Ready again. (How fast kwok then finishes the old pod's
        # deletion varied from seconds to minutes between runs, so it is not asserted here.)
        k8s_cluster.resume_heartbeat(node)
        k8s_cluster.wait_node_ready(node, timeout=60)
    finally:
        k8s_cluster.kubectl("delete", "node", node, "--ignore-not-found", "--wait=false")


# ---------------------------------------------------------------- namespaces


def test_deleting_a_namespace_deletes_everything_in_it(k8s_cluster: ControlPlane) -> None:
    ns = f"gone-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("create", "namespace", ns)
    affinity = pinned_affinity(INSTANCE_TYPE, [C5N], one_per_node=False, app="doomed")
    k8s_cluster.apply(
        statefulset("doomed", 3, affinity),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}},
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "doomed"},
            "spec": {"clusterIP": "None", "selector": {"app": "doomed"}, "ports": [{"port": 1883}]},
        },
        namespace=ns,
    )
    wait_for(
        lambda: sum(map(running_ready, pods(k8s_cluster, ns, "app=doomed"))) == 3,
        120,
        "3 Running+Ready pods",
        pod_states(k8s_cluster, ns),
    )
    k8s_cluster.kubectl("delete", "namespace", ns, "--wait=false")
    wait_for(
        lambda: k8s_cluster.kubectl("get", "namespace", ns, check=False).returncode != 0,
        150,
        f"namespace {ns} to be deleted",
    )
    left = k8s_cluster.kubectl("get", "all,configmaps", "-n", ns, "-o", "name").stdout
    assert left.strip() == ""
