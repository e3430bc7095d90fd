from __future__ import annotations

from typing import Any

from xmq_operator.pod_health import creation_refusals, pod_problems
from xmq_operator.rollout import parse_time

from .fake_kube import pod

NOW = parse_time("2026-12-01T12:00:00Z") or 0.0


def _with_status(name: str, **status: Any) -> dict[str, Any]:
    item = pod(name, ready=False)
    item["status"].update(status)
    return item


def test_an_unschedulable_pod_reports_the_schedulers_reason() -> None:
    message = "0/12 nodes are available: 12 node(s) didn't match Pod's node affinity/selector."
    item = _with_status(
        "xmq-0",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
            }
        ],
    )
    (problem,) = pod_problems([item], NOW)
    assert problem.reason == "Unschedulable"
    assert message in problem.message and "xmq-0" in problem.message


def test_image_pull_errors_crash_loops_and_config_errors_are_named() -> None:
    def waiting(name: str, reason: str) -> dict[str, Any]:
        state = {"waiting": {"reason": reason, "message": f"{reason} detail"}}
        return _with_status(
            name,
            containerStatuses=[
                {"name": "broker", "image": "xmq:9", "restartCount": 7, "state": state}
            ],
        )

    problems = pod_problems(
        [
            waiting("xmq-2", "CreateContainerConfigError"),
            waiting("xmq-0", "ImagePullBackOff"),
            waiting("xmq-1", "CrashLoopBackOff"),
        ],
        NOW,
    )
    assert [p.reason for p in problems] == ["ImagePullError", "CrashLoop", "ContainerConfigError"]
    assert "xmq:9" in problems[0].message
    assert "7 restarts" in problems[1].message


def test_a_termination_past_its_grace_period_is_stuck_but_a_fresh_one_is_not() -> None:
    fresh, stuck = pod("xmq-0"), pod("xmq-1")
    fresh["metadata"]["deletionTimestamp"] = "2026-12-01T11:59:50Z"
    stuck["metadata"]["deletionTimestamp"] = "2026-12-01T11:55:00Z"
    (problem,) = pod_problems([fresh, stuck], NOW)
    assert problem.reason == "StuckTerminating" and "xmq-1" in problem.message


def test_healthy_pods_have_no_problem() -> None:
    assert pod_problems([pod("xmq-0"), pod("xmq-1")], NOW) == []


def _failed_create(at: str, message: str) -> dict[str, Any]:
    return {"reason": "FailedCreate", "message": message, "lastTimestamp": at, "metadata": {}}


def test_recent_failed_creates_while_pods_are_missing_are_a_refusal() -> None:
    events = [
        _failed_create("2026-12-01T11:59:00Z", 'pods "xmq-0" is forbidden: violates PodSecurity'),
        _failed_create("2026-12-01T11:59:40Z", 'pods "xmq-1" is forbidden: violates PodSecurity'),
        {"reason": "SuccessfulCreate", "message": "ok", "lastTimestamp": "2026-12-01T11:59:59Z"},
    ]
    (problem,) = creation_refusals(events, missing_pods=2, now=NOW)
    assert problem.reason == "PodCreationRefused"
    assert '"xmq-1" is forbidden' in problem.message
    assert creation_refusals(events, missing_pods=0, now=NOW) == []


def test_old_failed_creates_are_history() -> None:
    events = [_failed_create("2026-12-01T11:50:00Z", "forbidden")]
    assert creation_refusals(events, missing_pods=1, now=NOW) == []
