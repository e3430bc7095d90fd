"""When a broker pod is dead, and which of its Redis leases to release (pure decisions).

Dead means: the pod object is deleted (or replaced by one with another UID), its container
restarted (leases started before the new container belong to the dead process), its Node was
deleted, or its Node carries the ``node.kubernetes.io/out-of-service`` taint. A pod on an
unreachable (NotReady) node is NOT dead: it may still be running and serving.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xmq.contract import NodeLease
from xmq_operator.rollout import parse_time

OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"


@dataclass(frozen=True, slots=True)
class Release:
    """Release the lease of ``node_id`` held by the dead pod ``pod_uid`` (run ``epoch``)."""

    node_id: str
    pod_name: str
    pod_uid: str
    epoch: int | None
    reason: str


def node_is_out_of_service(node: Mapping[str, Any]) -> bool:
    """Whether the Node carries the out-of-service taint (its pods are known dead)."""
    taints = node.get("spec", {}).get("taints") or []
    return any(taint.get("key") == OUT_OF_SERVICE_TAINT for taint in taints)


def restart_cutoff(pod: Mapping[str, Any], container: str) -> float | None:
    """Leases of this pod started before the returned time belong to a dead container run."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") != container:
            continue
        moments: list[float | None] = []
        state = status.get("state") or {}
        last = status.get("lastState") or {}
        moments.append(parse_time((state.get("terminated") or {}).get("finishedAt")))
        moments.append(parse_time((last.get("terminated") or {}).get("finishedAt")))
        if int(status.get("restartCount") or 0) > 0:
            moments.append(parse_time((state.get("running") or {}).get("startedAt")))
        known = [moment for moment in moments if moment is not None]
        return max(known) if known else None
    return None


def releases_for_deleted_pod(
    pod_name: str, pod_uid: str, leases: Iterable[NodeLease], member_ids: Iterable[str], why: str
) -> list[Release]:
    """Every node of a dead pod: its leases (fenced by UID + epoch) and lease-less members."""
    releases: dict[str, Release] = {}
    for lease in leases:
        if lease.pod_name == pod_name and lease.pod_uid == pod_uid:
            releases[lease.node_id] = Release(lease.node_id, pod_name, pod_uid, lease.epoch, why)
    leased = {lease.node_id for lease in leases}
    for node_id in member_ids:
        if node_id not in leased and node_id.rpartition("-")[0] == pod_name:
            releases.setdefault(node_id, Release(node_id, pod_name, pod_uid, None, why))
    return sorted(releases.values(), key=lambda item: item.node_id)


def releases_for_restarted_container(
    pod: Mapping[str, Any], container: str, leases: Iterable[NodeLease]
) -> list[Release]:
    """Leases of this pod's UID written by a container run that has since died."""
    cutoff = restart_cutoff(pod, container)
    if cutoff is None:
        return []
    metadata = pod.get("metadata", {})
    uid = metadata.get("uid")
    return [
        Release(lease.node_id, lease.pod_name, lease.pod_uid, lease.epoch, "container restarted")
        for lease in sorted(leases, key=lambda item: item.node_id)
        if lease.pod_uid == uid and lease.started_at < cutoff
    ]


def leases_of_statefulset(leases: Iterable[NodeLease], statefulset: str) -> list[NodeLease]:
    """The leases held by pods of the StatefulSet ``statefulset`` (``<name>-<ordinal>``)."""
    own = re.compile(rf"^{re.escape(statefulset)}-[0-9]+$")
    return [lease for lease in leases if own.match(lease.pod_name)]


def sweep(
    leases: Sequence[NodeLease],
    pods: Mapping[str, Mapping[str, Any]],
    nodes: Mapping[str, Mapping[str, Any]],
    container: str,
) -> list[Release]:
    """Leases held by dead pods, for the periodic sweeper.

    ``leases`` must be read BEFORE ``pods`` and ``nodes`` are listed: a lease is then never
    newer than the pod list, so a missing pod really is gone.
    """
    releases: list[Release] = []
    for lease in sorted(leases, key=lambda item: item.node_id):
        pod = pods.get(lease.pod_name)
        reason: str | None = None
        if pod is None:
            reason = "pod deleted"
        elif pod.get("metadata", {}).get("uid") != lease.pod_uid:
            reason = "pod replaced"
        else:
            node_name = pod.get("spec", {}).get("nodeName")
            node = nodes.get(node_name) if node_name else None
            if node_name and node is None:
                reason = "node deleted"
            elif node is not None and node_is_out_of_service(node):
                reason = "node out of service"
            else:
                cutoff = restart_cutoff(pod, container)
                if cutoff is not None and lease.started_at < cutoff:
                    reason = "container restarted"
        if reason is not None:
            releases.append(
                Release(lease.node_id, lease.pod_name, lease.pod_uid, lease.epoch, reason)
            )
    return releases
