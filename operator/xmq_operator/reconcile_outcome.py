"""What one reconciliation of an XmqCluster saw, and the status and re-check it leads to.

:class:`Seen` collects the observation (problems, rendered children, roll decision, pods,
Redis members); :func:`reconcile_outcome` turns it into the status patch and the delay before
the next look. Pure: no Kubernetes or Redis call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from xmq_operator.desired_state import Desired
from xmq_operator.naming import TEMPLATE_HASH_ANNOTATION, ClusterNames
from xmq_operator.rollout import RollDecision, pod_view
from xmq_operator.status import Observation, Problem, status_patch

STEADY_RECHECK_SECONDS = 30.0


@dataclass(slots=True)
class Outcome:
    """What one reconciliation decided: the status to write and when to look again."""

    status: dict[str, Any]
    retry_after: float | None
    problems: list[Problem] = field(default_factory=list)


@dataclass(slots=True)
class Seen:
    """What one reconciliation observed and did (input of the status)."""

    problems: list[Problem] = field(default_factory=list)
    desired: Desired | None = None
    applied: bool = False
    decision: RollDecision | None = None
    scaling_in: bool = False
    pods: list[dict[str, Any]] = field(default_factory=list)
    live_statefulset: dict[str, Any] | None = None
    members: list[str] | None = None


def reconcile_outcome(
    body: dict[str, Any], names: ClusterNames, seen: Seen, paused: bool
) -> Outcome:
    """The status patch of what ``seen`` holds, and when to reconcile again."""
    metadata = body["metadata"]
    generation = int(metadata.get("generation") or 0)
    previous = body.get("status") or {}
    applied_generation = (
        generation if seen.applied else int(previous.get("observedGeneration") or 0)
    )
    desired = seen.desired
    running_hash = desired.template_hash if seen.applied and desired else None
    running_hash = running_hash or template_hash_of(seen.live_statefulset)
    spec_replicas = int((body.get("spec") or {}).get("replicas", 0) or 0)
    if seen.live_statefulset is not None and not seen.applied:
        spec_replicas = int(seen.live_statefulset.get("spec", {}).get("replicas", 0) or 0)
    elif desired is not None:
        spec_replicas = desired.spec.replicas
    views = [pod_view(pod) for pod in seen.pods]
    current = [view for view in views if not view.terminating]
    extra: dict[str, Any] = {"selector": names.selector()}
    if seen.applied and desired is not None:
        extra.update(
            configHash=desired.config_hash,
            templateHash=desired.template_hash,
            clusterName=desired.cluster_name,
        )
    decision = seen.decision
    extra["rollout"] = (
        None if decision is None else {"reason": decision.reason, "pod": decision.pod or ""}
    )
    obs = Observation(
        replicas=spec_replicas,
        ready_replicas=sum(1 for view in current if view.ready),
        updated_replicas=sum(
            1 for view in current if running_hash and view.template_hash == running_hash
        ),
        current_replicas=len(current),
        paused=paused,
        roll=decision,
        problems=seen.problems,
        members=seen.members,
        extra=extra,
        applied_generation=applied_generation,
        scaling_in=seen.scaling_in,
    )
    status = status_patch(previous, obs, generation, datetime.now(UTC))
    retry_after: float | None = None
    if decision is not None and decision.in_progress:
        retry_after = decision.retry_after or 2.0
    if seen.problems and retry_after is None:
        retry_after = STEADY_RECHECK_SECONDS
    return Outcome(status=status, retry_after=retry_after, problems=seen.problems)


def template_hash_of(statefulset_body: dict[str, Any] | None) -> str | None:
    """The pod template hash a StatefulSet body carries (None without one)."""
    if statefulset_body is None:
        return None
    template = statefulset_body.get("spec", {}).get("template", {})
    value = (template.get("metadata", {}).get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION)
    return str(value) if value else None
