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
    conditions = _by_type(desired_conditions(_obs(roll=roll, ready_replicas=3), had_paused=False))
    assert conditions["Progressing"] == Condition(
        "Progressing", "True", "RollingUpdate", "pod xmq-2 is terminating"
    )
    assert conditions["Ready"].status == "False"


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
