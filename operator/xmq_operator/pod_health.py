"""What keeps broker pods from running, read from the pods and the StatefulSet's Events (pure).

Each finding is a :class:`~xmq_operator.status.Problem` whose reason names the cause the way
an operator on call searches for it: ``Unschedulable`` (with the scheduler's message),
``PodCreationRefused`` (admission, e.g. Pod Security, refusing the StatefulSet's pods),
``ImagePullError``, ``CrashLoop``, ``ContainerConfigError`` and ``StuckTerminating``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from xmq_operator.rollout import parse_time
from xmq_operator.status import Problem

IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
CONFIG_ERROR_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError"})
FAILED_CREATE_WINDOW_SECONDS = 120.0
"""A FailedCreate Event older than this (by its last occurrence) is history, not a problem."""
STUCK_TERMINATION_MARGIN_SECONDS = 30.0


def _name(pod: Mapping[str, Any]) -> str:
    return str(pod.get("metadata", {}).get("name", "?"))


def _unschedulable(pod: Mapping[str, Any]) -> Problem | None:
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            message = condition.get("message") or condition.get("reason") or "not scheduled"
            return Problem("Unschedulable", f"pod {_name(pod)} cannot be scheduled: {message}")
    return None


def _container_problem(pod: Mapping[str, Any]) -> Problem | None:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        detail = waiting.get("message") or reason
        if reason in IMAGE_PULL_REASONS:
            return Problem(
                "ImagePullError", f"pod {_name(pod)}: image {status.get('image')}: {detail}"
            )
        if reason == "CrashLoopBackOff":
            restarts = int(status.get("restartCount") or 0)
            return Problem(
                "CrashLoop", f"pod {_name(pod)} is crash-looping ({restarts} restarts): {detail}"
            )
        if reason in CONFIG_ERROR_REASONS:
            return Problem("ContainerConfigError", f"pod {_name(pod)}: {detail}")
    return None


def _stuck_terminating(pod: Mapping[str, Any], now: float) -> Problem | None:
    metadata = pod.get("metadata", {})
    deleting_at = parse_time(metadata.get("deletionTimestamp"))
    if deleting_at is None:
        return None
    # deletionTimestamp is the moment the grace period ends.
    late = now - deleting_at
    if late < STUCK_TERMINATION_MARGIN_SECONDS:
        return None
    node = pod.get("spec", {}).get("nodeName") or "no node"
    return Problem(
        "StuckTerminating",
        f"pod {_name(pod)} is still terminating {late:.0f}s after its grace period "
        f"(node {node}: unreachable? see the out-of-service taint)",
    )


def pod_problems(pods: Iterable[Mapping[str, Any]], now: float) -> list[Problem]:
    """One problem per troubled pod (the first cause found), ordered by pod name."""
    problems: list[Problem] = []
    for pod in sorted(pods, key=_name):
        for check in (_unschedulable(pod), _container_problem(pod), _stuck_terminating(pod, now)):
            if check is not None:
                problems.append(check)
                break
    return problems


def creation_refusals(
    events: Sequence[Mapping[str, Any]], missing_pods: int, now: float
) -> list[Problem]:
    """The StatefulSet's recent FailedCreate Events while pods are missing (the newest one)."""
    if missing_pods <= 0:
        return []
    recent = [
        event
        for event in events
        if event.get("reason") == "FailedCreate"
        and now - _event_time(event) <= FAILED_CREATE_WINDOW_SECONDS
    ]
    if not recent:
        return []
    newest = max(recent, key=_event_time)
    return [Problem("PodCreationRefused", str(newest.get("message") or "pod creation refused"))]


def _event_time(event: Mapping[str, Any]) -> float:
    series = event.get("series") or {}
    for value in (
        series.get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        event.get("metadata", {}).get("creationTimestamp"),
    ):
        moment = parse_time(value)
        if moment is not None:
            return moment
    return 0.0
