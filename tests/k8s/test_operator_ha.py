"""``xmq-operator`` processes with leader election: only the Lease holder acts (handlers,
metrics), the others stand by; a leader stopped with SIGTERM hands over at once, a killed one
once its lease has expired."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from scripts.k8s.cluster import ControlPlane
from tests.k8s.test_operator_harness import (
    OperatorProcess,
    cluster_manifest,
    secret_manifest,
    wait_for,
)
from tests.k8s.test_operator_process import CRD
from tests.support.redis_server import running_redis

RECONCILES = 'xmq_operator_reconciles_total{handler="reconcile",result="ok"}'


def _acted(operator: OperatorProcess) -> float:
    """Handler runs of any kind and result (0 when it never ran one)."""
    text = operator.get("/metrics")[1]
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("xmq_operator_reconciles_total{")
    )


def test_only_the_leader_acts_and_a_stopped_leader_hands_over(
    k8s_cluster: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    plane = k8s_cluster
    plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", CRD)
    lease = f"xmq-operator-{uuid.uuid4().hex[:6]}"
    election = [
        f"--namespace={k8s_namespace}",
        f"--leader-election-namespace={k8s_namespace}",
        f"--leader-election-name={lease}",
        *("--lease-duration", "6", "--renew-deadline", "4", "--retry-period", "0.5"),
    ]
    first = OperatorProcess(plane.kubeconfig, tmp_path / "a.log", "--identity=a", *election)
    second: OperatorProcess | None = None
    try:
        wait_for(lambda: first.metric("xmq_operator_leader") == 1, 60, "a to lead")
        second = OperatorProcess(plane.kubeconfig, tmp_path / "b.log", "--identity=b", *election)
        standby = second
        wait_for(lambda: standby.get("/healthz") == (200, "standby\n"), 60, "b standing by")
        holder = plane.kubectl_json("get", "lease", lease, "-n", k8s_namespace)["spec"]
        assert holder["holderIdentity"] == "a"

        with running_redis() as server:
            plane.apply(secret_manifest("redis", k8s_namespace, {"url": server.url}))
            plane.apply(cluster_manifest("ha", k8s_namespace, replicas=1))

            def statefulset_replicas() -> int:
                found = plane.kubectl(
                    "get", "statefulset", "ha", "-n", k8s_namespace,
                    "-o", "jsonpath={.spec.replicas}", check=False,
                )  # fmt: skip
                return int(found.stdout or 0) if found.returncode == 0 else 0

            wait_for(lambda: statefulset_replicas() == 1, 60, "the leader to create the brokers")
            wait_for(lambda: (first.metric(RECONCILES) or 0) >= 1, 30, "a's reconcile count")
            assert _acted(standby) == 0
            assert standby.metric("xmq_operator_leader") == 0

            # SIGTERM: a stops its handlers, releases the Lease, b takes over at once.
            assert first.stop() == 0
            wait_for(lambda: standby.metric("xmq_operator_leader") == 1, 20, "b to lead")
            holder = plane.kubectl_json("get", "lease", lease, "-n", k8s_namespace)["spec"]
            assert holder["holderIdentity"] == "b"
            assert holder["leaseTransitions"] >= 1
            plane.kubectl(
                "patch", "xmqcluster", "ha", "-n", k8s_namespace,
                "--type=merge", "-p", '{"spec":{"replicas":2}}',
            )  # fmt: skip
            wait_for(lambda: statefulset_replicas() == 2, 60, "the new leader to act")
            assert _acted(standby) >= 1

            # kill -9: no release; a third candidate takes over once the lease (6 s) expired.
            third = OperatorProcess(plane.kubeconfig, tmp_path / "c.log", "--identity=c", *election)
            try:
                wait_for(lambda: third.get("/healthz") == (200, "standby\n"), 60, "c standing by")
                standby.proc.kill()
                standby.proc.wait()
                killed_at = time.monotonic()
                wait_for(lambda: third.metric("xmq_operator_leader") == 1, 30, "c to lead")
                took = time.monotonic() - killed_at
                assert 3 <= took <= 15, took  # not before the lease could expire, not much after
            finally:
                third.stop()
    finally:
        first.stop()
        if second is not None:
            second.stop()
