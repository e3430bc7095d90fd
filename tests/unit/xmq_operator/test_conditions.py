from __future__ import annotations

from datetime import UTC, datetime, timedelta

from xmq_operator.conditions import Condition, condition_status, merge_conditions
from xmq_operator.rollout import Action, RollDecision
from xmq_operator.status import Observation, Problem, desired_conditions, status_patch

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def test_last_transition_time_moves_only_when_the_status_flips() -> None:
    first = merge_conditions(None, [Condition("Ready", "False", "ReplicasNotReady", "0/4")], 1, T0)
    same = merge_conditions(first, [Condition("Ready", "False", "Other", "1/4")], 2, T1)
    flipped = merge_conditions(same, [Condition("Ready", "True", "AllReplicasReady", "4/4")], 2, T1)
    assert first[0]["lastTransitionTime"] == "2026-11-30T03:00:00Z"
    assert same[0]["lastTransitionTime"] == "2026-11-30T03:00:00Z"
    assert same[0]["reason"] == "Other"
    assert same[0]["observedGeneration"] == 2
    assert flipped[0]["lastTransitionTime"] == "2026-11-30T03:05:00Z"


def test_conditions_are_ordered_and_unknown_ones_kept() -> None:
    previous = [{"type": "Custom", "status": "True"}]
    merged = merge_conditions(
        previous,
        [
            Condition("Degraded", "False", "AsExpected"),
            Condition("Ready", "True", "AllReplicasReady"),
        ],
        1,
        T0,
    )
    assert [item["type"] for item in merged] == ["Ready", "Degraded", "Custom"]


def _obs(**overrides: object) -> Observation:
    fields: dict[str, object] = {
        "replicas": 4,
        "ready_replicas": 4,
        "updated_replicas": 4,
        "current_replicas": 4,
        "paused": False,
        "roll": RollDecision(Action.DONE, "every pod runs the current template"),
    }
    fields.update(overrides)
    return Observation(**fields)  # type: ignore[arg-type]


def _by_type(conditions: list[Condition]) -> dict[str, Condition]:
    return {condition.type: condition for condition in conditions}


def test_a_settled_cluster_is_ready_not_progressing_not_degraded() -> None:
    conditions = _by_type(desired_conditions(_obs(), had_paused=False))
    assert conditions["Ready"].status == "True"
    assert conditions["Progressing"].status == "False"
    assert conditions["Degraded"].status == "False"
    assert "ReconciliationPaused" not in conditions


def test_a_roll_is_progressing_with_its_reason() -> None:
    roll = RollDecision(Action.WAIT, "pod xmq-2 is terminating")
    obs = _obs(roll=roll, ready_replicas=3, current_replicas=3, updated_replicas=2)
    conditions = _by_type(desired_conditions(obs, had_paused=False, generation=3))
    assert conditions["Progressing"] == Condition(
        "Progressing", "True", "RollingUpdate", "pod xmq-2 is terminating", 3
    )
    assert conditions["Ready"].status == "False"


def test_waiting_for_a_missing_pod_is_no_roll() -> None:
    # Every pod runs the current template: a missing one is being created, nothing rolls.
    roll = RollDecision(Action.WAIT, "waiting for pod ordinal 2 to be created")
    obs = _obs(roll=roll, ready_replicas=3, current_replicas=3, updated_replicas=3)
    conditions = _by_type(desired_conditions(obs, had_paused=False))
    assert conditions["Progressing"].reason == "WaitingForPods"


def test_an_invalid_config_on_a_healthy_cluster_is_degraded_but_still_ready() -> None:
    problem = Problem("InvalidConfig", "spec.config is invalid: mqtt.max_packet_size: too small")
    obs = _obs(problems=[problem], applied_generation=4)
    patch = status_patch(None, obs, 5, T0)
    conditions = {item["type"]: item for item in patch["conditions"]}
    assert patch["observedGeneration"] == 4
    assert patch["updatedReplicas"] == 4
    assert conditions["Ready"]["status"] == "True"
    assert conditions["Ready"]["observedGeneration"] == 4
    assert "generation 5 is not running" in conditions["Ready"]["message"]
    assert (conditions["Degraded"]["status"], conditions["Degraded"]["reason"]) == (
        "True",
        "InvalidConfig",
    )
    assert conditions["Degraded"]["observedGeneration"] == 5


def test_a_paused_spec_change_does_not_advance_observed_generation() -> None:
    patch = status_patch(None, _obs(paused=True, applied_generation=6), 7, T0)
    conditions = {item["type"]: item for item in patch["conditions"]}
    assert patch["observedGeneration"] == 6
    assert conditions["ReconciliationPaused"]["status"] == "True"
    assert conditions["ReconciliationPaused"]["observedGeneration"] == 7
    assert conditions["Progressing"]["reason"] == "ReconciliationPaused"
    assert "reconciliation is paused" in conditions["Ready"]["message"]


def test_a_namespace_of_another_cluster_is_not_ready_even_with_ready_pods() -> None:
    problem = Problem("RedisNamespaceInUse", "belongs to XmqCluster UID other")
    conditions = _by_type(desired_conditions(_obs(problems=[problem]), had_paused=False))
    assert (conditions["Ready"].status, conditions["Ready"].reason) == (
        "False",
        "RedisNamespaceInUse",
    )
    assert conditions["Degraded"].reason == "RedisNamespaceInUse"


def test_pods_that_cannot_run_block_progress_with_the_cause() -> None:
    problem = Problem("Unschedulable", "pod xmq-3 cannot be scheduled: 0/12 nodes are available")
    roll = RollDecision(Action.WAIT, "waiting for pod ordinal 3 to be created")
    obs = _obs(problems=[problem], roll=roll, ready_replicas=3, current_replicas=4)
    conditions = _by_type(desired_conditions(obs, had_paused=False))
    assert (conditions["Progressing"].status, conditions["Progressing"].reason) == (
        "False",
        "Blocked",
    )
    assert "0/12 nodes" in conditions["Progressing"].message
    assert conditions["Ready"].reason == "Unschedulable"
    assert conditions["Degraded"].reason == "Unschedulable"


def test_a_problem_is_degraded_with_its_reason_and_not_ready() -> None:
    problem = Problem("MissingSecret", "Secret mq/redis not found")
    conditions = _by_type(desired_conditions(_obs(problems=[problem]), had_paused=False))
    assert conditions["Degraded"].status == "True"
    assert conditions["Degraded"].reason == "MissingSecret"
    assert conditions["Ready"].reason == "MissingSecret"


def test_pausing_and_resuming() -> None:
    paused = _by_type(desired_conditions(_obs(paused=True), had_paused=False))
    assert paused["ReconciliationPaused"].status == "True"
    assert paused["Progressing"].reason == "ReconciliationPaused"
    resumed = _by_type(desired_conditions(_obs(), had_paused=True))
    assert resumed["ReconciliationPaused"].status == "False"


def test_status_patch_carries_counts_members_and_conditions() -> None:
    patch = status_patch(None, _obs(members=["b-0", "a-0"]), 5, T0)
    assert patch["observedGeneration"] == 5
    assert patch["readyReplicas"] == 4
    assert patch["members"] == ["a-0", "b-0"]
    assert condition_status(patch["conditions"], "Ready") == "True"
    again = status_patch(patch, _obs(), 6, T1)
    assert again["conditions"][0]["lastTransitionTime"] == "2026-11-30T03:00:00Z"
