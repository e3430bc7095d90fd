"""Which broker pod to replace next, if any: the roll policy as a pure function.

Pods are replaced one at a time: unready outdated pods first (they serve nobody), then the
highest ordinal first, and only while every other pod has been Ready for ``minReadySeconds``.
Deleting a pod runs its preStop drain (sessions handed over) within the grace period; the
StatefulSet recreates it from the new template. An updated pod that stays unready past the
stuck timeout is force-replaced (and the roll waits for it).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from xmq_operator.naming import TEMPLATE_HASH_ANNOTATION

_ORDINAL = re.compile(r"-(\d+)$")


class Action(enum.Enum):
    DONE = "done"
    WAIT = "wait"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class PodView:
    """What the planner needs to know about one broker pod."""

    name: str
    ordinal: int
    template_hash: str | None
    ready: bool
    ready_since: float | None
    """Unix time of the pod's last Ready transition (ready or not)."""
    created_at: float
    terminating: bool


@dataclass(frozen=True, slots=True)
class RollDecision:
    action: Action
    reason: str
    pod: str | None = None
    retry_after: float | None = None

    @property
    def in_progress(self) -> bool:
        return self.action is not Action.DONE


def parse_time(value: str | None) -> float | None:
    """Unix time of an RFC 3339 timestamp from the API server."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def pod_view(pod: dict[str, Any]) -> PodView:
    """Summarise a pod object (as returned by the API server)."""
    metadata = pod.get("metadata", {})
    match = _ORDINAL.search(metadata.get("name", ""))
    ready = False
    ready_since: float | None = None
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            ready = condition.get("status") == "True"
            ready_since = parse_time(condition.get("lastTransitionTime"))
    return PodView(
        name=metadata.get("name", ""),
        ordinal=int(match.group(1)) if match else -1,
        template_hash=(metadata.get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION),
        ready=ready,
        ready_since=ready_since,
        created_at=parse_time(metadata.get("creationTimestamp")) or 0.0,
        terminating=metadata.get("deletionTimestamp") is not None,
    )


@dataclass(frozen=True, slots=True)
class RollPolicy:
    replicas: int
    desired_hash: str
    min_ready_seconds: float
    stuck_pod_timeout_seconds: float


def _not_ready_for(pod: PodView, now: float) -> float:
    since = pod.ready_since if pod.ready_since is not None else pod.created_at
    return now - max(since, pod.created_at)


def plan_roll(pods: Sequence[PodView], policy: RollPolicy, now: float) -> RollDecision:
    """Decide the next step of the roll at time ``now``."""
    live = [pod for pod in pods if pod.ordinal < policy.replicas or pod.terminating]
    terminating = sorted(pod.name for pod in live if pod.terminating)
    if terminating:
        return RollDecision(Action.WAIT, f"pod {terminating[0]} is terminating", retry_after=5)
    current = {pod.ordinal: pod for pod in live}
    missing = [ordinal for ordinal in range(policy.replicas) if ordinal not in current]
    if missing:
        return RollDecision(
            Action.WAIT, f"waiting for pod ordinal {missing[0]} to be created", retry_after=5
        )
    outdated = [pod for pod in current.values() if pod.template_hash != policy.desired_hash]
    stuck = sorted(
        (
            pod
            for pod in current.values()
            if pod.template_hash == policy.desired_hash
            and not pod.ready
            and _not_ready_for(pod, now) >= policy.stuck_pod_timeout_seconds
        ),
        key=lambda pod: -pod.ordinal,
    )
    if stuck:
        return RollDecision(
            Action.DELETE,
            f"pod {stuck[0].name} not Ready for {policy.stuck_pod_timeout_seconds:.0f}s: "
            "force-replacing it",
            pod=stuck[0].name,
        )
    if not outdated:
        return RollDecision(Action.DONE, "every pod runs the current template")
    unready = sorted((pod for pod in outdated if not pod.ready), key=lambda pod: -pod.ordinal)
    if unready:
        return RollDecision(
            Action.DELETE, f"replacing unready outdated pod {unready[0].name}", pod=unready[0].name
        )
    target = max(outdated, key=lambda pod: pod.ordinal)
    for pod in sorted(current.values(), key=lambda pod: pod.ordinal):
        if pod.name == target.name:
            continue
        if not pod.ready:
            return RollDecision(
                Action.WAIT, f"pod {pod.name} is not Ready; {target.name} waits", retry_after=5
            )
        ready_for = now - (pod.ready_since or pod.created_at)
        if ready_for < policy.min_ready_seconds:
            return RollDecision(
                Action.WAIT,
                f"pod {pod.name} Ready for {ready_for:.0f}s of {policy.min_ready_seconds:.0f}s",
                retry_after=max(1.0, policy.min_ready_seconds - ready_for),
            )
    return RollDecision(
        Action.DELETE, f"replacing outdated pod {target.name} (highest ordinal)", pod=target.name
    )
