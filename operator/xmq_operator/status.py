"""The XmqCluster status from what the operator observed (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from xmq_operator.conditions import (
    DEGRADED,
    PAUSED,
    PROGRESSING,
    READY,
    Condition,
    condition_status,
    merge_conditions,
)
from xmq_operator.rollout import RollDecision


@dataclass(frozen=True, slots=True)
class Problem:
    """Why the cluster is Degraded (a reason in CamelCase and a message for humans)."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Observation:
    replicas: int
    ready_replicas: int
    updated_replicas: int
    current_replicas: int
    paused: bool
    roll: RollDecision | None
    problems: Sequence[Problem] = ()
    members: Sequence[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def desired_conditions(obs: Observation, had_paused: bool) -> list[Condition]:
    """The conditions that describe ``obs``."""
    problem = obs.problems[0] if obs.problems else None
    if problem is not None:
        messages = "; ".join(item.message for item in obs.problems)
        degraded = Condition(DEGRADED, "True", problem.reason, messages)
    else:
        degraded = Condition(DEGRADED, "False", "AsExpected", "no problem observed")

    counts = f"{obs.ready_replicas}/{obs.replicas} pods ready, {obs.updated_replicas} updated"
    if obs.paused:
        progressing = Condition(PROGRESSING, "False", "ReconciliationPaused", counts)
    elif obs.roll is not None and obs.roll.in_progress and obs.current_replicas > 0:
        progressing = Condition(PROGRESSING, "True", "RollingUpdate", obs.roll.reason)
    elif obs.ready_replicas != obs.replicas or obs.current_replicas != obs.replicas:
        progressing = Condition(PROGRESSING, "True", "WaitingForPods", counts)
    else:
        progressing = Condition(PROGRESSING, "False", "Complete", counts)

    if obs.ready_replicas >= obs.replicas and problem is None:
        ready = Condition(READY, "True", "AllReplicasReady", counts)
    elif problem is not None:
        ready = Condition(READY, "False", problem.reason, problem.message)
    else:
        ready = Condition(READY, "False", "ReplicasNotReady", counts)

    conditions = [ready, progressing, degraded]
    if obs.paused:
        conditions.append(
            Condition(PAUSED, "True", "PausedByAnnotation", "children are not reconciled")
        )
    elif had_paused:
        conditions.append(Condition(PAUSED, "False", "Resumed", "reconciling"))
    return conditions


def status_patch(
    previous: dict[str, Any] | None,
    obs: Observation,
    generation: int,
    now: datetime,
) -> dict[str, Any]:
    """The ``status`` fields to write (a merge patch)."""
    before = previous or {}
    conditions = before.get("conditions")
    had_paused = condition_status(conditions, PAUSED) is not None
    patch: dict[str, Any] = {
        "observedGeneration": generation,
        "replicas": obs.current_replicas,
        "readyReplicas": obs.ready_replicas,
        "updatedReplicas": obs.updated_replicas,
        "conditions": merge_conditions(
            conditions, desired_conditions(obs, had_paused), generation, now
        ),
        **obs.extra,
    }
    if obs.members is not None:
        patch["members"] = sorted(obs.members)
    return patch
