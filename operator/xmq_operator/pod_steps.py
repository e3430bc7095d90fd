"""The operator's disruptive steps: one pod at a time, through the Eviction API.

A roll replaces one outdated pod per step (:func:`~xmq_operator.rollout.plan_roll` decides
which), a scale-in removes the highest ordinal one per step; both evict (policy/v1 Eviction),
so the PodDisruptionBudget and a concurrent ``kubectl drain`` are respected: a 429 from the
budget means "not now", and the step is retried. The StatefulSet is scaled in only after its
last pod was evicted, so its controller never deletes several pods at once. Old revisioned
ConfigMaps are collected once nothing mounts them (the newest ``REVISIONS_KEPT`` stay, for a
roll back by reverting the spec).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from xmq_operator.events import post_event
from xmq_operator.kube_api import KubeApi, KubeError
from xmq_operator.naming import ClusterNames
from xmq_operator.rollout import Action, RollDecision, RollPolicy, parse_time, plan_roll, pod_view
from xmq_operator.spec import ClusterSpec

logger = logging.getLogger(__name__)

REVISIONS_KEPT = 3
PDB_RETRY_SECONDS = 5.0
TOO_MANY_REQUESTS = 429


def roll_policy(spec: ClusterSpec, template_hash: str) -> RollPolicy:
    strategy = spec.update_strategy
    return RollPolicy(
        replicas=spec.replicas,
        desired_hash=template_hash,
        min_ready_seconds=strategy.min_ready_seconds,
        stuck_pod_timeout_seconds=strategy.stuck_pod_timeout_seconds,
    )


def _ordinal(pod: dict[str, Any]) -> int:
    return pod_view(pod).ordinal


def mounted_config_maps(pods: Iterable[dict[str, Any]]) -> set[str]:
    """Names of the ConfigMaps the pods mount."""
    names: set[str] = set()
    for pod in pods:
        for volume in pod.get("spec", {}).get("volumes") or []:
            name = (volume.get("configMap") or {}).get("name")
            if name:
                names.add(str(name))
    return names


def stale_revisions(
    config_maps: Sequence[dict[str, Any]], in_use: set[str], kept: int = REVISIONS_KEPT
) -> list[str]:
    """Revisioned ConfigMaps to delete: not in use and not among the ``kept`` newest."""

    def created(item: dict[str, Any]) -> tuple[float, str]:
        metadata = item["metadata"]
        return (parse_time(metadata.get("creationTimestamp")) or 0.0, metadata["name"])

    newest = sorted(config_maps, key=created, reverse=True)
    keep = {item["metadata"]["name"] for item in newest[:kept]} | in_use
    return sorted(
        item["metadata"]["name"] for item in newest if item["metadata"]["name"] not in keep
    )


class PodSteps:
    """Evictions and clean-ups for one reconciliation (the caller holds the cluster's lock)."""

    def __init__(self, kube: KubeApi) -> None:
        self.kube = kube

    def evict(self, body: dict[str, Any], pod: dict[str, Any], why: str) -> RollDecision | None:
        """Evict ``pod``; None when done (or already gone), else the WAIT the PDB imposes."""
        metadata = pod["metadata"]
        try:
            evicted = self.kube.evict(metadata["namespace"], metadata["name"], metadata["uid"])
        except KubeError as exc:
            if exc.status != TOO_MANY_REQUESTS:
                raise
            return RollDecision(
                Action.WAIT,
                f"the PodDisruptionBudget refuses evicting {metadata['name']} now; retrying",
                pod=metadata["name"],
                retry_after=PDB_RETRY_SECONDS,
            )
        if evicted:
            logger.info("evicted pod %s/%s: %s", metadata["namespace"], metadata["name"], why)
            post_event(self.kube, body, "Normal", "RollingPod", why)
        return None

    def roll_step(
        self,
        body: dict[str, Any],
        spec: ClusterSpec,
        template_hash: str,
        pods: list[dict[str, Any]],
        now: float,
        *,
        act: bool,
    ) -> RollDecision:
        """Plan the roll and, when ``act`` and the plan says so, evict one pod."""
        decision = plan_roll([pod_view(pod) for pod in pods], roll_policy(spec, template_hash), now)
        if act and decision.action is Action.DELETE and decision.pod is not None:
            target = next(pod for pod in pods if pod["metadata"]["name"] == decision.pod)
            refused = self.evict(body, target, decision.reason)
            if refused is not None:
                return refused
        return decision

    def scale_in_step(
        self,
        body: dict[str, Any],
        live_replicas: int,
        wanted: int,
        pods: list[dict[str, Any]],
        *,
        act: bool,
    ) -> tuple[int, RollDecision | None]:
        """The StatefulSet's replicas for this step and the scale-in decision (None: none).

        One pod per step: wait while any pod terminates, evict the highest ordinal, and only
        then lower the StatefulSet by one (so its controller does not recreate it).
        """
        if live_replicas <= wanted:
            return wanted, None
        terminating = sorted(
            pod["metadata"]["name"] for pod in pods if pod["metadata"].get("deletionTimestamp")
        )
        if terminating:
            return live_replicas, RollDecision(
                Action.WAIT,
                f"scale-in to {wanted}: pod {terminating[0]} is terminating",
                retry_after=2.0,
            )
        victim = next((pod for pod in pods if _ordinal(pod) == live_replicas - 1), None)
        if victim is None or not act:
            step = live_replicas - 1 if act else live_replicas
            return step, RollDecision(
                Action.WAIT, f"scale-in to {wanted}: {live_replicas} pods", retry_after=2.0
            )
        why = f"scale-in to {wanted}: evicting {victim['metadata']['name']} (highest ordinal)"
        refused = self.evict(body, victim, why)
        if refused is not None:
            return live_replicas, refused
        return live_replicas - 1, RollDecision(
            Action.WAIT, why, pod=victim["metadata"]["name"], retry_after=2.0
        )

    def collect_revisions(
        self, names: ClusterNames, current: str, pods: Iterable[dict[str, Any]]
    ) -> list[str]:
        """Delete revisioned ConfigMaps nothing needs any more; the names deleted."""
        config_maps = self.kube.list_objects(
            "v1", "ConfigMap", names.namespace, names.config_revisions_selector()
        )
        in_use = mounted_config_maps(pods) | {current}
        return [
            name
            for name in stale_revisions(config_maps, in_use)
            if self.kube.delete("v1", "ConfigMap", names.namespace, name)
        ]
