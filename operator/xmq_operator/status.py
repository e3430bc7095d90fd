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
from xmq_operator.rollout import Action, RollDecision


@dataclass(frozen=True, slots=True)
class Problem:
    """Why the cluster is Degraded (a reason in CamelCase and a message for humans)."""

    reason: str
    message: str


BLOCKING_REASONS = frozenset({"MissingSecret", "RedisUnreachable", "RedisNamespaceInUse"})
"""Problems that stop the cluster serving even while its pods report Ready."""
POD_REASONS = frozenset(
    {
        "Unschedulable",
        "PodCreationRefused",
        "ImagePullError",
        "CrashLoop",
        "ContainerConfigError",
        "StuckTerminating",
    }
)
"""Problems that keep pods from running: nothing progresses until someone acts."""


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
    applied_generation: int | None = None
    """Generation of the spec whose children are applied (None: the observed one; 0: none)."""
    scaling_in: bool = False


def desired_conditions(
    obs: Observation, had_paused: bool, generation: int | None = None
) -> list[Condition]:
    """The conditions that describe ``obs`` (``generation``: the spec's, for Degraded).

    Ready and Progressing describe what is applied (their ``observedGeneration`` is the
    applied generation); Degraded and the pause judge the current spec.
    """
    current = generation
    applied = obs.applied_generation if obs.applied_generation is not None else current
    problem = obs.problems[0] if obs.problems else None
    if problem is not None:
        messages = "; ".join(item.message for item in obs.problems)
        degraded = Condition(DEGRADED, "True", problem.reason, messages, current)
    else:
        degraded = Condition(DEGRADED, "False", "AsExpected", "no problem observed", current)

    counts = f"{obs.ready_replicas}/{obs.replicas} pods ready, {obs.updated_replicas} updated"
    behind = ""
    if applied is not None and current is not None and applied != current:
        why = "reconciliation is paused" if obs.paused else "it was not applied"
        behind = f"; spec generation {current} is not running ({why})"
    pod_problems = [item for item in obs.problems if item.reason in POD_REASONS]
    rolling = obs.roll is not None and (
        obs.roll.action is Action.DELETE or obs.updated_replicas < obs.current_replicas
    )
    if obs.paused:
        progressing = Condition(PROGRESSING, "False", "ReconciliationPaused", counts + behind)
    elif pod_problems:
        message = "; ".join(item.message for item in pod_problems)
        progressing = Condition(PROGRESSING, "False", "Blocked", message)
    elif obs.scaling_in and obs.roll is not None:
        progressing = Condition(PROGRESSING, "True", "ScalingIn", obs.roll.reason)
    elif obs.roll is not None and obs.roll.in_progress and rolling:
        progressing = Condition(PROGRESSING, "True", "RollingUpdate", obs.roll.reason)
    elif obs.ready_replicas != obs.replicas or obs.current_replicas != obs.replicas:
        progressing = Condition(PROGRESSING, "True", "WaitingForPods", counts)
    else:
        progressing = Condition(PROGRESSING, "False", "Complete", counts)

    blocking = next((item for item in obs.problems if item.reason in BLOCKING_REASONS), None)
    if blocking is not None:
        ready = Condition(READY, "False", blocking.reason, blocking.message)
    elif obs.ready_replicas >= obs.replicas:
        ready = Condition(READY, "True", "AllReplicasReady", counts + behind)
    elif pod_problems:
        ready = Condition(READY, "False", pod_problems[0].reason, counts)
    else:
        ready = Condition(READY, "False", "ReplicasNotReady", counts)

    conditions = [
        _at(ready, applied),
        _at(progressing, applied),
        degraded,
    ]
    if obs.paused:
        conditions.append(
            Condition(PAUSED, "True", "PausedByAnnotation", "children are not reconciled", current)
        )
    elif had_paused:
        conditions.append(Condition(PAUSED, "False", "Resumed", "reconciling", current))
    return conditions


def _at(condition: Condition, generation: int | None) -> Condition:
    return Condition(
        condition.type, condition.status, condition.reason, condition.message, generation
    )


def status_patch(
    previous: dict[str, Any] | None,
    obs: Observation,
    generation: int,
    now: datetime,
) -> dict[str, Any]:
    """The ``status`` fields to write (a merge patch).

    ``observedGeneration`` is the generation whose children are applied: a paused or refused
    spec change does not advance it (GitOps tools then see the change as not yet rolled out).
    """
    before = previous or {}
    conditions = before.get("conditions")
    had_paused = condition_status(conditions, PAUSED) is not None
    applied = obs.applied_generation if obs.applied_generation is not None else generation
    patch: dict[str, Any] = {
        "replicas": obs.current_replicas,
        "readyReplicas": obs.ready_replicas,
        "updatedReplicas": obs.updated_replicas,
        "conditions": merge_conditions(
            conditions, desired_conditions(obs, had_paused, generation), generation, now
        ),
        "observedGeneration": applied,
        **obs.extra,
    }
    if obs.members is not None:
        patch["members"] = sorted(obs.members)
    return patch
