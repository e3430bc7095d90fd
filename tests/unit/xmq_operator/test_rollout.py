from __future__ import annotations

from dataclasses import replace

import pytest

from xmq_operator.rollout import Action, PodView, RollPolicy, plan_roll, pod_view

NOW = 10_000.0
POLICY = RollPolicy(
    replicas=4, desired_hash="new", min_ready_seconds=10, stuck_pod_timeout_seconds=600
)


def _pod(ordinal: int, template: str = "old", *, ready: bool = True, since: float = 0.0) -> PodView:
    return PodView(
        name=f"xmq-{ordinal}",
        ordinal=ordinal,
        template_hash=template,
        ready=ready,
        ready_since=since,
        created_at=0.0,
        terminating=False,
    )


def test_highest_ordinal_goes_first_when_all_are_ready() -> None:
    decision = plan_roll([_pod(i) for i in range(4)], POLICY, NOW)
    assert (decision.action, decision.pod) == (Action.DELETE, "xmq-3")


def test_an_unready_outdated_pod_goes_before_higher_ordinals() -> None:
    pods = [_pod(0), _pod(1, ready=False, since=NOW - 1), _pod(2), _pod(3)]
    decision = plan_roll(pods, POLICY, NOW)
    assert (decision.action, decision.pod) == (Action.DELETE, "xmq-1")


def test_only_one_pod_at_a_time_while_one_terminates() -> None:
    pods = [_pod(0), _pod(1), _pod(2), replace(_pod(3), terminating=True)]
    assert plan_roll(pods, POLICY, NOW).action is Action.WAIT


def test_waits_for_a_missing_pod_to_be_recreated() -> None:
    decision = plan_roll([_pod(0), _pod(1), _pod(2)], POLICY, NOW)
    assert decision.action is Action.WAIT
    assert "ordinal 3" in decision.reason


def test_waits_while_another_pod_is_not_ready() -> None:
    pods = [_pod(0), _pod(1, "new", ready=False, since=NOW - 5), _pod(2), _pod(3)]
    decision = plan_roll(pods, POLICY, NOW)
    assert decision.action is Action.WAIT
    assert "xmq-1" in decision.reason


def test_waits_until_the_others_have_been_ready_for_min_ready_seconds() -> None:
    pods = [_pod(0), _pod(1), _pod(2), _pod(3, "new", since=NOW - 4)]
    decision = plan_roll(pods, POLICY, NOW)
    assert decision.action is Action.WAIT
    assert decision.retry_after == pytest.approx(6)
    later = plan_roll(pods, POLICY, NOW + 6)
    assert (later.action, later.pod) == (Action.DELETE, "xmq-2")


def test_done_when_every_pod_runs_the_new_template() -> None:
    decision = plan_roll([_pod(i, "new") for i in range(4)], POLICY, NOW)
    assert decision.action is Action.DONE
    assert not decision.in_progress


def test_an_updated_pod_stuck_unready_is_force_replaced_after_the_timeout() -> None:
    stuck = _pod(3, "new", ready=False, since=NOW - 601)
    pods = [_pod(0), _pod(1), _pod(2), stuck]
    decision = plan_roll(pods, POLICY, NOW)
    assert (decision.action, decision.pod) == (Action.DELETE, "xmq-3")
    young = replace(stuck, ready_since=NOW - 100)
    assert plan_roll([*pods[:3], young], POLICY, NOW).action is Action.WAIT


def test_full_roll_order_simulation_replaces_each_pod_once_highest_first() -> None:
    pods = {i: _pod(i) for i in range(4)}
    order: list[str] = []
    now = NOW
    for _ in range(50):
        decision = plan_roll(list(pods.values()), POLICY, now)
        if decision.action is Action.DONE:
            break
        if decision.action is Action.DELETE and decision.pod is not None:
            order.append(decision.pod)
            ordinal = int(decision.pod.rsplit("-", 1)[1])
            pods[ordinal] = _pod(ordinal, "new", since=now + 1)
            assert sum(1 for pod in pods.values() if not pod.ready) <= 1
        now += 5
    assert order == ["xmq-3", "xmq-2", "xmq-1", "xmq-0"]


def test_pods_beyond_the_replica_count_are_ignored() -> None:
    decision = plan_roll([*(_pod(i, "new") for i in range(4)), _pod(4)], POLICY, NOW)
    assert decision.action is Action.DONE


def test_pod_view_reads_the_api_object() -> None:
    view = pod_view(
        {
            "metadata": {
                "name": "prod-12",
                "creationTimestamp": "2026-11-30T03:00:00Z",
                "annotations": {"xmq.io/template-hash": "abc"},
            },
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "lastTransitionTime": "2026-11-30T03:00:10Z",
                    }
                ]
            },
        }
    )
    assert (view.ordinal, view.template_hash, view.ready, view.terminating) == (
        12,
        "abc",
        True,
        False,
    )
    assert view.ready_since is not None
    assert view.created_at is not None
    assert view.ready_since - view.created_at == 10
