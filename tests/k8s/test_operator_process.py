"""The ``xmq-operator`` console script as a real process: liveness endpoint, clean stop."""

from __future__ import annotations

from pathlib import Path

from scripts.k8s.cluster import ControlPlane
from tests.k8s.test_operator_harness import OperatorProcess, wait_for

CRD = Path(__file__).resolve().parents[2] / "crds" / "xmqcluster.yaml"


def test_the_console_script_serves_liveness_and_stops_on_sigterm(
    k8s_cluster: ControlPlane, tmp_path: Path
) -> None:
    k8s_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", CRD)
    operator = OperatorProcess(k8s_cluster.kubeconfig, tmp_path / "operator.log")
    try:
        wait_for(lambda: operator.get("/healthz")[0] == 200, 60, "xmq-operator's liveness")
        assert operator.metric("xmq_operator_leader") == 1  # no election: it acts alone
        assert operator.stop() == 0
    finally:
        operator.stop()
