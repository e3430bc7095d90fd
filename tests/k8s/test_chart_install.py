"""The Helm chart: lint, template, install with the built helm, RBAC proven by running the
operator with the chart's ServiceAccount token, helm test, uninstall leaving nothing behind."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from scripts.k8s.cluster import ControlPlane, KubectlError
from tests.k8s.test_operator_harness import (
    cluster_manifest,
    condition,
    running_operator,
    secret_manifest,
    seed_node,
    wait_for,
)
from tests.support.pod_security import restricted_violations
from tests.support.redis_server import running_redis
from xmq.contract import ClusterKeys

CHART = Path(__file__).resolve().parents[2] / "charts" / "xmq"


def _template(plane: ControlPlane, *args: str) -> list[dict[str, Any]]:
    # No --kube-version: the chart renders with helm's defaults (however helm was built).
    out = plane.helm("template", "rel", CHART, "--namespace", "ops", *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def test_the_chart_lints_clean(k8s_cluster: ControlPlane) -> None:
    result = k8s_cluster.helm("lint", "--strict", CHART)
    assert "0 chart(s) failed" in result.stdout


def test_the_default_render_is_the_operator_with_least_privilege(k8s_cluster: ControlPlane) -> None:
    docs = _template(k8s_cluster)
    kinds = sorted(doc["kind"] for doc in docs)
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",  # the Grafana dashboard
        "Deployment",
        "Job",
        "Role",  # the leader Lease
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]
    deployment = next(doc for doc in docs if doc["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["xmq-operator"]
    assert "--leader-election-namespace=ops" in container["args"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for doc in docs:
        if doc["kind"] in {"Deployment", "Job"}:
            pod_spec = doc["spec"]["template"]["spec"]
            assert restricted_violations(pod_spec) == [], doc["kind"]
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "rel"
        assert labels["app.kubernetes.io/name"] == "xmq"
    role = next(doc for doc in docs if doc["kind"] == "ClusterRole")
    assert role["metadata"]["name"] == "ops-rel-xmq-operator"  # unique per release
    verbs = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert "*" not in verbs
    secrets = next(rule for rule in role["rules"] if "secrets" in rule["resources"])
    assert secrets["verbs"] == ["get"]
    job = next(doc for doc in docs if doc["kind"] == "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "test"


MONITORING_APIS = [
    *("--api-versions", "monitoring.coreos.com/v1/PodMonitor"),
    *("--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"),
    *("--api-versions", "monitoring.coreos.com/v1/PrometheusRule"),
]


def test_monitoring_objects_render_only_where_the_prometheus_operator_is(
    k8s_cluster: ControlPlane,
) -> None:
    kinds = {doc["kind"] for doc in _template(k8s_cluster)}
    assert not kinds & {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
    docs = {doc["kind"]: doc for doc in _template(k8s_cluster, *MONITORING_APIS)}
    # The rules and the dashboard are the files the promtool/Prometheus tests check.
    alerts = yaml.safe_load((CHART / "files" / "xmq-alerts.yaml").read_text())
    assert docs["PrometheusRule"]["spec"]["groups"] == alerts["groups"]
    dashboard = docs["ConfigMap"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(dashboard["data"]["xmq-dashboard.json"])
    assert shipped == json.loads((CHART / "files" / "xmq-dashboard.json").read_text())
    pod_monitor = docs["PodMonitor"]["spec"]
    assert pod_monitor["jobLabel"] == "app.kubernetes.io/name"  # job="xmq", as the alerts say
    assert pod_monitor["selector"]["matchLabels"]["app.kubernetes.io/component"] == "broker"
    (endpoint,) = pod_monitor["podMetricsEndpoints"]
    assert endpoint["relabelings"][0]["regex"] == "health(-[0-9]+)?"
    assert docs["ServiceMonitor"]["spec"]["endpoints"][0]["port"] == "health"


def test_watch_namespaces_get_roles_and_the_cluster_role_keeps_only_cluster_reads(
    k8s_cluster: ControlPlane,
) -> None:
    docs = _template(k8s_cluster, "--set", "operator.watchNamespaces={mq-a,mq-b}")
    roles = [doc for doc in docs if doc["kind"] == "Role"]
    watched = {r["metadata"]["namespace"] for r in roles if "leader" not in r["metadata"]["name"]}
    assert watched == {"mq-a", "mq-b"}
    bindings = {doc["metadata"]["namespace"] for doc in docs if doc["kind"] == "RoleBinding"}
    assert bindings == {"mq-a", "mq-b", "ops"}
    (cluster_role,) = [doc for doc in docs if doc["kind"] == "ClusterRole"]
    resources = {res for rule in cluster_role["rules"] for res in rule["resources"]}
    assert resources == {"nodes", "namespaces", "customresourcedefinitions"}
    verbs = {verb for rule in cluster_role["rules"] for verb in rule["verbs"]}
    assert verbs == {"list", "watch"}
    (deployment,) = [doc for doc in docs if doc["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=mq-a" in args and "--namespace=mq-b" in args


def test_an_xmqcluster_is_rendered_from_values(k8s_cluster: ControlPlane) -> None:
    docs = _template(
        k8s_cluster, "--set", "cluster.enabled=true", "--set", "cluster.spec.replicas=3"
    )
    (cluster,) = [doc for doc in docs if doc["kind"] == "XmqCluster"]
    assert cluster["spec"]["replicas"] == 3
    assert cluster["spec"]["redis"]["secretRef"]["name"] == "xmq-redis"


@pytest.mark.parametrize(
    "setting",
    [
        "bogus=1",
        "operator.bogus=1",
        "image.pullPolicy=Sometimes",
        "cluster.name=Bad_Name",
        "cluster.spec.resources.requests.cpu=lots",
        "cluster.spec.replicass=3",
        "cluster.spec.placement.zones.mode=Everywhere",
        "cluster.spec.listeners.mqtt.port=70000",
    ],
    ids=[
        "unknown-top-level-key",
        "unknown-nested-key",
        "bad-enum",
        "bad-cluster-name",
        "spec-bad-quantity",
        "spec-unknown-field",
        "spec-bad-enum",
        "spec-port-out-of-range",
    ],
)
def test_the_values_schema_refuses_unknown_or_bad_values(
    k8s_cluster: ControlPlane, setting: str
) -> None:
    with pytest.raises(KubectlError) as refused:
        _template(k8s_cluster, "--set", setting)
    assert "schema" in refused.value.stderr.lower() or "values" in refused.value.stderr.lower()


def _sa_kubeconfig(plane: ControlPlane, namespace: str, account: str, path: Path) -> Path:
    token = plane.kubectl("create", "token", account, "-n", namespace, "--duration=1h").stdout
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "test",
                "cluster": {"server": plane.api_url, "certificate-authority": str(plane.ca_file)},
            }
        ],
        "users": [{"name": account, "user": {"token": token.strip()}}],
        "contexts": [{"name": "sa", "context": {"cluster": "test", "user": account}}],
        "current-context": "sa",
    }
    path.write_text(json.dumps(config))
    return path


@pytest.fixture
def release(k8s_cluster: ControlPlane) -> Iterator[tuple[str, str]]:
    namespace = f"ops-{uuid.uuid4().hex[:8]}"
    name = "xmq"
    k8s_cluster.kubectl("create", "namespace", namespace)
    try:
        yield namespace, name
    finally:
        k8s_cluster.helm("uninstall", name, "-n", namespace, check=False)
        k8s_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_install_run_with_the_charts_rbac_test_and_uninstall(
    k8s_cluster: ControlPlane, k8s_namespace: str, release: tuple[str, str], tmp_path: Path
) -> None:
    namespace, name = release
    k8s_cluster.helm(
        "install", name, CHART, "-n", namespace, "--wait", "--timeout", "180s",
        "--set", "image.repository=registry.example/xmq",
    )  # fmt: skip
    k8s_cluster.kubectl("get", "crd", "xmqclusters.xmq.io")
    deployment = k8s_cluster.kubectl_json("get", "deployment", "xmq-operator", "-n", namespace)
    assert deployment["status"].get("availableReplicas") == 2

    # The operator, with nothing but the chart's ServiceAccount token, runs a whole cluster.
    kubeconfig = _sa_kubeconfig(k8s_cluster, namespace, "xmq-operator", tmp_path / "sa.kubeconfig")
    denied = k8s_cluster.kubectl(
        "--kubeconfig", kubeconfig, "get", "secrets", "-n", k8s_namespace, check=False
    )
    assert denied.returncode != 0  # list secrets is not granted
    with running_redis(decode_responses=True) as server, running_operator(kubeconfig):
        k8s_cluster.apply(secret_manifest("redis", k8s_namespace, {"url": server.url}))
        k8s_cluster.apply(cluster_manifest("rbac", k8s_namespace, replicas=2))

        def ready() -> bool:
            body = k8s_cluster.kubectl_json("get", "xmqcluster", "rbac", "-n", k8s_namespace)
            cond = condition(body, "Ready")
            return cond is not None and cond["status"] == "True"

        wait_for(ready, 120, "the XmqCluster run by the chart's ServiceAccount to be Ready")
        pod = k8s_cluster.kubectl_json("get", "pod", "rbac-1", "-n", k8s_namespace)
        client = server.client()
        keys = ClusterKeys(f"{k8s_namespace}.rbac")
        lease = seed_node(client, keys, pod, 0, ["c1"])
        k8s_cluster.kubectl("delete", "pod", "rbac-1", "-n", k8s_namespace, "--wait=false")
        wait_for(
            lambda: not client.exists(keys.lease(lease.node_id)),
            20,
            "the lease release under the chart's RBAC",
        )
        client.close()

    tested = k8s_cluster.helm("test", name, "-n", namespace, "--timeout", "120s")
    assert "Succeeded" in tested.stdout

    k8s_cluster.helm("uninstall", name, "-n", namespace, "--wait", "--timeout", "120s")
    selector = f"app.kubernetes.io/instance={name}"
    for kind in ("deployment", "service", "serviceaccount", "job"):
        left = k8s_cluster.kubectl_json("get", kind, "-n", namespace, "-l", selector)["items"]
        assert left == [], kind
    for kind in ("clusterrole", "clusterrolebinding"):
        left = k8s_cluster.kubectl_json("get", kind, "-l", selector)["items"]
        assert left == [], kind
