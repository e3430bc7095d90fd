"""Dead-pod cleanup: release a dead pod's Redis leases and orphan its sessions.

Triggered by pod deletion, container restart, Node deletion or the out-of-service taint
(handlers) and by a periodic sweeper. Every release is a compare-and-delete on pod UID and
epoch (:data:`xmq.contract.RELEASE_DEAD_NODE`), so a live replacement is never touched.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from xmq.contract import CleanupOutcome, CleanupResult
from xmq_operator.dead_pods import (
    Release,
    leases_of_statefulset,
    releases_for_deleted_pod,
    releases_for_restarted_container,
    sweep,
)
from xmq_operator.desired_state import parse_spec
from xmq_operator.events import post_event
from xmq_operator.kube_api import KubeError
from xmq_operator.naming import LABEL_INSTANCE, ClusterNames
from xmq_operator.reconciler import Reconciler
from xmq_operator.redis_state import ClusterRedis
from xmq_operator.spec import API_GROUP, API_VERSION, KIND
from xmq_operator.statefulset import BROKER_CONTAINER

logger = logging.getLogger(__name__)


class DeadPodCleaner:
    """Runs releases against the right cluster's Redis and reports them as Events."""

    def __init__(self, reconciler: Reconciler) -> None:
        self.reconciler = reconciler

    def _cluster_of(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        metadata = pod.get("metadata", {})
        name = (metadata.get("labels") or {}).get(LABEL_INSTANCE)
        if not name:
            return None
        return self.reconciler.kube.get_optional(
            f"{API_GROUP}/{API_VERSION}", KIND, metadata.get("namespace", ""), name
        )

    def _redis(self, cluster: dict[str, Any]) -> ClusterRedis:
        """The cluster's Redis, only while its key namespace is recorded as this cluster's
        (else :class:`~xmq_operator.reconciler.NamespaceInUseError`: nothing is released)."""
        return self.reconciler.owned_redis(cluster, parse_spec(cluster))

    def apply(
        self, cluster: dict[str, Any], redis_state: ClusterRedis, releases: Iterable[Release]
    ) -> list[tuple[Release, CleanupResult]]:
        """Run each release; post one Event per lease actually released."""
        done: list[tuple[Release, CleanupResult]] = []
        for release in releases:
            result = redis_state.release(release.node_id, release.pod_uid, release.epoch)
            done.append((release, result))
            if result.outcome in {CleanupOutcome.LEASE_DELETED, CleanupOutcome.NO_LEASE} and (
                result.outcome is CleanupOutcome.LEASE_DELETED or result.sessions_orphaned
            ):
                message = (
                    f"released node {release.node_id} of pod {release.pod_name} "
                    f"(uid {release.pod_uid}, epoch {release.epoch or 'any'}): {release.reason}; "
                    f"{result.sessions_orphaned} sessions orphaned"
                )
                logger.info("%s", message)
                post_event(self.reconciler.kube, cluster, "Normal", "DeadPodCleanup", message)
        return done

    def pod_deleted(self, pod: dict[str, Any], why: str = "pod deleted") -> int:
        """Release every node of a dead pod; returns how many leases were deleted."""
        cluster = self._cluster_of(pod)
        if cluster is None:
            return 0
        metadata = pod["metadata"]
        redis_state = self._redis(cluster)
        snapshot = redis_state.snapshot()
        releases = releases_for_deleted_pod(
            metadata["name"], metadata["uid"], snapshot.leases, snapshot.members, why
        )
        done = self.apply(cluster, redis_state, releases)
        return sum(1 for _, result in done if result.outcome is CleanupOutcome.LEASE_DELETED)

    def pod_changed(self, pod: dict[str, Any]) -> int:
        """Release the leases of container runs that died (restart or termination)."""
        statuses = pod.get("status", {}).get("containerStatuses") or []
        restarted = any(
            int(item.get("restartCount") or 0) > 0 or (item.get("state") or {}).get("terminated")
            for item in statuses
        )
        if not restarted:
            return 0
        cluster = self._cluster_of(pod)
        if cluster is None:
            return 0
        redis_state = self._redis(cluster)
        snapshot = redis_state.snapshot()
        releases = releases_for_restarted_container(pod, BROKER_CONTAINER, snapshot.leases)
        done = self.apply(cluster, redis_state, releases)
        return sum(1 for _, result in done if result.outcome is CleanupOutcome.LEASE_DELETED)

    def sweep_cluster(self, cluster: dict[str, Any]) -> int:
        """The periodic sweep of one cluster: leases first, then pods and nodes."""
        redis_state = self._redis(cluster)
        snapshot = redis_state.snapshot()
        if not snapshot.leases:
            return 0
        metadata = cluster["metadata"]
        names = ClusterNames(metadata["name"], metadata["namespace"])
        pods = {pod["metadata"]["name"]: pod for pod in self.reconciler.pods(names)}
        try:
            nodes = {node["metadata"]["name"]: node for node in self.reconciler.kube.list_nodes()}
        except KubeError as exc:
            logger.warning("sweeper cannot list nodes (%s): node checks skipped", exc)
            nodes = {pod.get("spec", {}).get("nodeName", ""): {} for pod in pods.values()}
        own = leases_of_statefulset(snapshot.leases, names.statefulset)
        releases = sweep(own, pods, nodes, BROKER_CONTAINER)
        done = self.apply(cluster, redis_state, releases)
        return sum(1 for _, result in done if result.outcome is CleanupOutcome.LEASE_DELETED)
