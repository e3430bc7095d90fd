"""Two chart installs side by side (same release name, two namespaces), each with namespaced
RBAC for its watched namespace, everything in namespaces enforcing Pod Security "restricted":
the operator pods, the helm test pod and the broker pods the operator creates are admitted,
and an operator running on one release's ServiceAccount token runs a cluster in its namespace
and can touch nothing in the other's."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from scripts.k8s.cluster import ControlPlane
from tests.k8s.test_chart_install import CHART, _sa_kubeconfig
from tests.k8s.test_operator_harness import (
    cluster_manifest,
    condition,
    running_operator,
    secret_manifest,
    wait_for,
)
from tests.support.redis_server import running_redis

RESTRICTED = "pod-security.kubernetes.io/enforce=restricted"


@contextmanager
def restricted_namespace(plane: ControlPlane, name: str) -> Iterator[str]:
    plane.kubectl("create", "namespace", name)
    try:
        plane.kubectl("label", "namespace", name, RESTRICTED)
        yield name
    finally:
        plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@contextmanager
def installed(plane: ControlPlane, namespace: str, watched: str) -> Iterator[None]:
    plane.helm(
        "install", "xmq", CHART, "-n", namespace, "--wait", "--timeout", "180s",
        "--set", "image.repository=registry.example/xmq",
        "--set", f"operator.watchNamespaces={{{watched}}}",
    )  # fmt: skip
    try:
        yield
    finally:
        plane.helm("uninstall", "xmq", "-n", namespace, "--wait", "--timeout", "120s", check=False)


def _can(plane: ControlPlane, account: str, *what: str) -> bool:
    answer = plane.kubectl("auth", "can-i", *what, f"--as={account}", check=False)
    return answer.stdout.strip() == "yes"


def test_two_releases_with_namespaced_rbac_in_restricted_namespaces(
    k8s_cluster: ControlPlane, tmp_path: Path
) -> None:
    plane = k8s_cluster
    uid = uuid.uuid4().hex[:6]
    ops_a, mq_a, ops_b, mq_b = (f"{n}-{uid}" for n in ("ops-a", "mq-a", "ops-b", "mq-b"))
    with ExitStack() as stack:
        for name in (ops_a, mq_a, ops_b, mq_b):
            stack.enter_context(restricted_namespace(plane, name))
        stack.enter_context(installed(plane, ops_a, mq_a))
        stack.enter_context(installed(plane, ops_b, mq_b))  # same release name, no clash

        for namespace in (ops_a, ops_b):
            deployment = plane.kubectl_json("get", "deployment", "xmq-operator", "-n", namespace)
            assert deployment["status"].get("availableReplicas") == 2, namespace
        # The helm test pod is admitted under "restricted" too.
        assert "Succeeded" in plane.helm("test", "xmq", "-n", ops_a, "--timeout", "120s").stdout

        account = f"system:serviceaccount:{ops_a}:xmq-operator"
        assert _can(plane, account, "patch", "statefulsets", "-n", mq_a)
        assert _can(plane, account, "create", "pods", "--subresource=eviction", "-n", mq_a)
        assert _can(plane, account, "list", "nodes")
        assert not _can(plane, account, "patch", "statefulsets", "-n", mq_b)
        assert not _can(plane, account, "delete", "pods", "-n", mq_b)
        assert not _can(plane, account, "delete", "pods", "-n", "default")
        assert not _can(plane, account, "get", "secrets", "-n", mq_b)
        assert not _can(plane, account, "list", "pods", "--all-namespaces")
        assert _can(
            plane, account, "update", "leases.coordination.k8s.io/xmq-operator", "-n", ops_a
        )
        assert not _can(plane, account, "update", "leases.coordination.k8s.io/other", "-n", ops_a)

        kubeconfig = _sa_kubeconfig(plane, ops_a, "xmq-operator", tmp_path / "a.kubeconfig")
        server = stack.enter_context(running_redis())
        stack.enter_context(running_operator(kubeconfig, namespaces=(mq_a,)))
        plane.apply(secret_manifest("redis", mq_a, {"url": server.url}))
        plane.apply(cluster_manifest("psa", mq_a, replicas=2))

        def pods() -> int:
            selector = "app.kubernetes.io/instance=psa"
            return len(plane.kubectl_json("get", "pods", "-n", mq_a, "-l", selector)["items"])

        def ready() -> bool:
            body = plane.kubectl_json("get", "xmqcluster", "psa", "-n", mq_a)
            cond = condition(body, "Ready")
            return cond is not None and cond["status"] == "True"

        # The StatefulSet's pods pass Pod Security "restricted" admission.
        wait_for(lambda: pods() == 2, 90, "the broker pods admitted in a restricted namespace")
        wait_for(ready, 90, "the cluster run on namespaced RBAC to be Ready")
