"""The operator's metrics: handler runs by result, per-cluster state from status, and the
/healthz + /metrics endpoint (a real HTTP server on loopback)."""

from __future__ import annotations

import urllib.error
import urllib.request

import kopf
import pytest
from prometheus_client import generate_latest

from xmq_operator.operator_metrics import HEARTBEAT_STALE_S, OperatorEndpoint, OperatorMetrics


def _value(metrics: OperatorMetrics, name: str, **labels: str) -> float | None:
    value = metrics.registry.get_sample_value(name, labels)
    return value


def test_handler_runs_are_counted_by_result_and_timed() -> None:
    metrics = OperatorMetrics()
    with metrics.run("reconcile"):
        pass
    with pytest.raises(kopf.TemporaryError), metrics.run("reconcile"):
        raise kopf.TemporaryError("roll in progress", delay=1)
    with pytest.raises(RuntimeError), metrics.run("observe"):
        raise RuntimeError("boom")
    total = "xmq_operator_reconciles_total"
    assert _value(metrics, total, handler="reconcile", result="ok") == 1
    assert _value(metrics, total, handler="reconcile", result="retry") == 1
    assert _value(metrics, total, handler="observe", result="error") == 1
    count = "xmq_operator_reconcile_duration_seconds_count"
    assert _value(metrics, count, handler="reconcile") == 2


def test_cluster_state_follows_the_status_and_goes_with_the_cluster() -> None:
    metrics = OperatorMetrics()
    status = {
        "replicas": 4,
        "readyReplicas": 3,
        "updatedReplicas": 2,
        "conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "Degraded", "status": "True"},
        ],
    }
    metrics.cluster_status("mq", "xmq", status)
    labels = {"namespace": "mq", "cluster": "xmq"}
    assert _value(metrics, "xmq_operator_cluster_ready_replicas", **labels) == 3
    assert _value(metrics, "xmq_operator_cluster_updated_replicas", **labels) == 2
    cond = "xmq_operator_cluster_condition"
    assert _value(metrics, cond, condition="Ready", **labels) == 0
    assert _value(metrics, cond, condition="Degraded", **labels) == 1
    metrics.cluster_status(
        "mq", "xmq", {"replicas": 4, "conditions": [{"type": "Ready", "status": "True"}]}
    )
    assert _value(metrics, cond, condition="Ready", **labels) == 1
    assert _value(metrics, cond, condition="Degraded", **labels) is None
    metrics.cluster_deleted("mq", "xmq")
    metrics.cluster_deleted("mq", "xmq")  # twice: nothing left, no error
    assert b'cluster="xmq"' not in generate_latest(metrics.registry)


def test_health_standby_is_healthy_the_leader_needs_a_recent_heartbeat() -> None:
    metrics = OperatorMetrics()
    assert metrics.healthy(100.0) == (True, "standby")
    metrics.set_leader(True)
    assert metrics.healthy(100.0)[0] is False
    metrics.heartbeat = 100.0
    assert metrics.healthy(100.0 + HEARTBEAT_STALE_S) == (True, "leader")
    assert metrics.healthy(100.0 + HEARTBEAT_STALE_S + 1)[0] is False
    assert _value(metrics, "xmq_operator_leader") == 1


def test_the_endpoint_serves_healthz_and_metrics() -> None:
    metrics = OperatorMetrics()
    endpoint = OperatorEndpoint(metrics, "127.0.0.1", 0, "/healthz")
    endpoint.start()
    base = f"http://127.0.0.1:{endpoint.port}"
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as answer:
            assert answer.status == 200
            assert answer.read() == b"standby\n"
        metrics.set_leader(True)
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(f"{base}/healthz", timeout=5)
        assert failed.value.code == 503
        failed.value.close()
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as answer:
            assert b"xmq_operator_leader 1.0" in answer.read()
    finally:
        endpoint.stop()
