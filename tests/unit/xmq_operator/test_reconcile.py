"""The reconciler's decisions against an in-memory API (the real one: tests/k8s)."""

from __future__ import annotations

from typing import Any, cast

from tests.unit.xmq_operator.cluster_bodies import cluster_body
from tests.unit.xmq_operator.fake_kube import FakeKube, FakeRedisPool, pod, redis_secret
from xmq_operator.desired_state import parse_spec, render
from xmq_operator.kube_api import KubeApi
from xmq_operator.naming import PAUSED_ANNOTATION
from xmq_operator.reconcile_outcome import Outcome
from xmq_operator.reconciler import Reconciler
from xmq_operator.redis_state import RedisPool


def _reconciler(kube: FakeKube, owner: str | None = None) -> Reconciler:
    kube.add(redis_secret())
    return Reconciler(cast(KubeApi, kube), cast(RedisPool, FakeRedisPool(owner)))


def _conditions(outcome: Outcome) -> dict[str, dict[str, Any]]:
    return {item["type"]: item for item in outcome.status["conditions"]}


def _running(kube: FakeKube, body: dict[str, Any], replicas: int) -> str:
    """A settled cluster: its children applied and ``replicas`` Ready pods of the template."""
    desired = render(body, parse_spec(body))
    for child in desired.children:
        kube.add(child)
    sts = dict(desired.statefulset)
    sts["spec"] = {**sts["spec"], "replicas": replicas}
    kube.add(sts)
    for ordinal in range(replicas):
        kube.add(pod(f"prod-{ordinal}", desired.template_hash))
    return desired.template_hash


def test_an_invalid_quantity_is_refused_before_anything_is_applied() -> None:
    kube = FakeKube()
    body = cluster_body({"resources": {"limits": {"cpu": "lots"}}})
    outcome = _reconciler(kube).reconcile(body, apply=True)
    assert kube.applied == []
    degraded = _conditions(outcome)["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "InvalidSpec")
    assert "resources.limits" in degraded["message"] and "lots" in degraded["message"]
    assert [(e["type"], e["reason"]) for e in kube.posted] == [("Warning", "InvalidSpec")]
    # The same problem seen again posts no second Warning.
    _reconciler(kube).reconcile(body, apply=True)


def test_a_hand_scaled_statefulset_is_scaled_back() -> None:
    kube = FakeKube()
    body = cluster_body()
    template = _running(kube, body, replicas=4)
    kube.objects[("StatefulSet", "prod")]["spec"]["replicas"] = 2
    for ordinal in (2, 3):
        del kube.objects[("Pod", f"prod-{ordinal}")]
    outcome = _reconciler(kube).reconcile(body, apply=True)
    assert kube.objects[("StatefulSet", "prod")]["spec"]["replicas"] == 4
    assert kube.evicted == []
    assert outcome.status["updatedReplicas"] == 2
    assert template


def test_scale_in_evicts_one_pod_at_a_time_highest_ordinal_first() -> None:
    kube = FakeKube()
    template = _running(kube, cluster_body(), replicas=4)
    reconciler = _reconciler(kube)
    body = cluster_body({"replicas": 2})

    outcome = reconciler.reconcile(body, apply=True)
    assert kube.evicted == ["prod-3"]
    assert kube.objects[("StatefulSet", "prod")]["spec"]["replicas"] == 3
    assert _conditions(outcome)["Progressing"]["reason"] == "ScalingIn"

    reconciler.reconcile(body, apply=True)  # prod-3 still drains: nothing else happens
    assert kube.evicted == ["prod-3"]
    assert kube.objects[("StatefulSet", "prod")]["spec"]["replicas"] == 3

    del kube.objects[("Pod", "prod-3")]
    reconciler.reconcile(body, apply=True)
    assert kube.evicted == ["prod-3", "prod-2"]
    assert kube.objects[("StatefulSet", "prod")]["spec"]["replicas"] == 2
    del kube.objects[("Pod", "prod-2")]
    outcome = reconciler.reconcile(body, apply=True)
    assert kube.evicted == ["prod-3", "prod-2"]
    assert _conditions(outcome)["Progressing"]["reason"] == "Complete"
    assert template


def test_a_pdb_refusal_waits_and_scales_nothing() -> None:
    kube = FakeKube()
    _running(kube, cluster_body(), replicas=4)
    kube.refuse_evictions = True
    outcome = _reconciler(kube).reconcile(cluster_body({"replicas": 3}), apply=True)
    assert kube.objects[("StatefulSet", "prod")]["spec"]["replicas"] == 4
    assert "PodDisruptionBudget refuses evicting prod-3" in outcome.status["rollout"]["reason"]
    assert outcome.retry_after is not None


def test_a_roll_evicts_through_the_eviction_api() -> None:
    kube = FakeKube()
    _running(kube, cluster_body(), replicas=4)
    body = cluster_body({"config": {"mqtt": {"receive_maximum": 10}}})
    outcome = _reconciler(kube).reconcile(body, apply=True)
    assert kube.evicted == ["prod-3"]
    assert ("Pod", "prod-3") in kube.objects  # evicted (terminating), not deleted directly
    assert _conditions(outcome)["Progressing"]["reason"] == "RollingUpdate"


def test_an_invalid_config_on_a_healthy_cluster_keeps_it_ready() -> None:
    kube = FakeKube()
    _running(kube, cluster_body(), replicas=4)
    body = cluster_body({"config": {"mqtt": {"max_packet_size": 1}}})
    body["status"] = {"observedGeneration": 2}
    outcome = _reconciler(kube).reconcile(body, apply=True)
    conditions = _conditions(outcome)
    assert kube.applied == []
    assert (conditions["Degraded"]["status"], conditions["Degraded"]["reason"]) == (
        "True",
        "InvalidConfig",
    )
    assert conditions["Ready"]["status"] == "True"
    assert outcome.status["updatedReplicas"] == 4
    assert outcome.status["observedGeneration"] == 2


def test_a_paused_spec_change_applies_nothing_and_keeps_the_observed_generation() -> None:
    kube = FakeKube()
    _running(kube, cluster_body(), replicas=4)
    body = cluster_body(
        {"config": {"mqtt": {"receive_maximum": 10}}}, annotations={PAUSED_ANNOTATION: "true"}
    )
    body["status"] = {"observedGeneration": 2}
    outcome = _reconciler(kube).reconcile(body, apply=True)
    conditions = _conditions(outcome)
    assert kube.applied == [] and kube.evicted == []
    assert outcome.status["observedGeneration"] == 2
    assert conditions["ReconciliationPaused"]["status"] == "True"
    assert conditions["Ready"]["status"] == "True"
    assert conditions["Ready"]["observedGeneration"] == 2
    assert outcome.status["updatedReplicas"] == 4  # the old template still runs everywhere


def test_a_namespace_recorded_for_another_cluster_is_left_alone() -> None:
    kube = FakeKube()
    outcome = _reconciler(kube, owner="someone-else").reconcile(cluster_body(), apply=True)
    assert kube.applied == []
    degraded = _conditions(outcome)["Degraded"]
    assert degraded["reason"] == "RedisNamespaceInUse" and "someone-else" in degraded["message"]
    assert _conditions(outcome)["Ready"]["status"] == "False"
    assert ("Warning", "RedisNamespaceInUse") in [(e["type"], e["reason"]) for e in kube.posted]


def test_old_config_revisions_are_collected_after_the_roll_keeping_three() -> None:
    kube = FakeKube()
    body = cluster_body({"replicas": 2})
    _running(kube, body, replicas=2)
    for number in range(5):
        kube.add(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": f"prod-config-old{number}",
                    "namespace": "mq",
                    "creationTimestamp": f"2026-01-0{number + 1}T00:00:00Z",
                },
            }
        )
    kube.objects[("Pod", "prod-0")]["spec"]["volumes"] = [
        {"name": "config", "configMap": {"name": "prod-config-old0"}}
    ]
    _reconciler(kube).reconcile(body, apply=True)
    names = sorted(name for kind, name in kube.objects if kind == "ConfigMap")
    current = render(body, parse_spec(body)).config_revision
    # current (newest) + old4 + old3 are the three newest; old0 is still mounted.
    assert names == sorted([current, "prod-config-old0", "prod-config-old3", "prod-config-old4"])
