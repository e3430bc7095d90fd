"""The kopf handlers: thin wiring from Kubernetes events to the reconciler and the cleaner.

Handlers are synchronous (kopf runs them in worker threads) and never sleep: a roll in
progress or a problem to re-check raises ``kopf.TemporaryError(delay=...)``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf
from pydantic import ValidationError

from xmq_operator.cleanup import DeadPodCleaner
from xmq_operator.dead_pods import node_is_out_of_service
from xmq_operator.kube_api import KubeApi, KubeError, load_configuration
from xmq_operator.naming import BROKER_COMPONENT, LABEL_COMPONENT, LABEL_MANAGED_BY, MANAGED_BY
from xmq_operator.operator_metrics import METRICS
from xmq_operator.ownership import ChildWatch, controller_owner
from xmq_operator.reconciler import Reconciler
from xmq_operator.redis_state import RedisPool, RedisUnavailableError
from xmq_operator.spec import API_GROUP, API_VERSION, KIND, PLURAL

logger = logging.getLogger(__name__)

CLUSTER = (API_GROUP, API_VERSION, PLURAL)
BROKER_POD_LABELS = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: BROKER_COMPONENT}
BROKER_POD_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_COMPONENT}={BROKER_COMPONENT}"
CHILD_LABELS = {LABEL_MANAGED_BY: MANAGED_BY}
RESYNC_INTERVAL_SECONDS = 10.0
KOPF_PREFIX = "kopf.xmq.io"
WATCHED_NAMESPACES = "watched_namespaces"
"""Memo key: the namespaces the operator was started for (empty: every namespace)."""

_EXPECTED_FAILURES = (LookupError, KubeError, ValidationError, ValueError, *RedisUnavailableError)


@dataclass(frozen=True, slots=True)
class OperatorState:
    kube: KubeApi
    redis_pool: RedisPool
    reconciler: Reconciler
    cleaner: DeadPodCleaner
    children: ChildWatch


def _state(memo: Any) -> OperatorState:
    state = memo.get("xmq_state") if isinstance(memo, Mapping) else None
    if not isinstance(state, OperatorState):
        raise kopf.TemporaryError("operator not started yet", delay=1)
    return state


def _plain(body: Mapping[str, Any]) -> dict[str, Any]:
    return copy.deepcopy({key: body[key] for key in body})


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    """Settings (no finalizers, state in our own annotations) and the shared clients."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.ERROR
    settings.execution.max_workers = 8
    settings.watching.reconnect_backoff = 1.0
    load_configuration()
    kube = KubeApi()
    redis_pool = RedisPool()
    reconciler = Reconciler(kube, redis_pool)
    memo["xmq_state"] = OperatorState(
        kube, redis_pool, reconciler, DeadPodCleaner(reconciler), ChildWatch()
    )


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In-cluster service account, else the kubeconfig named by KUBECONFIG (read now)."""
    info: kopf.ConnectionInfo | None = kopf.login_with_service_account(
        **kwargs
    ) or kopf.login_with_kubeconfig(**kwargs)
    return info


@kopf.on.cleanup()
def shutdown(memo: Any, **_: Any) -> None:
    state = memo.get("xmq_state") if isinstance(memo, Mapping) else None
    if isinstance(state, OperatorState):
        state.redis_pool.close()
        state.kube.close()


@kopf.on.resume(*CLUSTER)
@kopf.on.create(*CLUSTER)
@kopf.on.update(*CLUSTER)
def reconcile(body: kopf.Body, patch: kopf.Patch, memo: Any, **_: Any) -> None:
    """Apply the children, take one roll step, write the status; re-check while unsettled."""
    with METRICS.run("reconcile"):
        outcome = _state(memo).reconciler.reconcile(_plain(body), apply=True)
        patch.status.update(outcome.status)
        if outcome.retry_after is not None:
            reasons = "; ".join(problem.message for problem in outcome.problems)
            raise kopf.TemporaryError(reasons or "roll in progress", delay=outcome.retry_after)


@kopf.timer(*CLUSTER, interval=RESYNC_INTERVAL_SECONDS, initial_delay=2.0)
def resync(body: kopf.Body, patch: kopf.Patch, memo: Any, **_: Any) -> None:
    """The periodic resync: repair drift, take a due step, refresh the status, and sweep
    dead pods' leases (the sweep also while paused)."""
    with METRICS.run("resync"):
        state = _state(memo)
        plain = _plain(body)
        if plain["metadata"].get("deletionTimestamp"):
            return
        outcome = state.reconciler.reconcile(plain, apply=True)
        patch.status.update(outcome.status)
        try:
            state.cleaner.sweep_cluster(plain)
        except _EXPECTED_FAILURES as exc:
            logger.debug("sweep of %s skipped: %s", plain["metadata"]["name"], exc)


@kopf.on.event(*CLUSTER)
def cluster_event(event: Mapping[str, Any], body: kopf.Body, memo: Any, **_: Any) -> None:
    """Forget the per-cluster state of a deleted XmqCluster."""
    if event.get("type") == "DELETED":
        _state(memo).reconciler.forget(str(body.get("metadata", {}).get("uid", "")))


@kopf.on.event("apps", "v1", "statefulsets", labels=CHILD_LABELS)
@kopf.on.event("", "v1", "services", labels=CHILD_LABELS)
@kopf.on.event("", "v1", "configmaps", labels=CHILD_LABELS)
@kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=CHILD_LABELS)
def child_event(event: Mapping[str, Any], body: kopf.Body, memo: Any, **_: Any) -> None:
    """A child deleted or edited by someone: reconcile its XmqCluster now (level-based)."""
    state = _state(memo)
    child = _plain(body)
    if not state.children.drifted(str(event.get("type")), child):
        return
    owner = controller_owner(child, f"{API_GROUP}/{API_VERSION}", KIND)
    if owner is None:
        return
    namespace = child["metadata"]["namespace"]
    try:
        cluster = state.kube.get_optional(f"{API_GROUP}/{API_VERSION}", KIND, namespace, owner)
        if cluster is None or cluster["metadata"].get("deletionTimestamp"):
            return
        logger.info(
            "%s %s/%s changed (%s): reconciling %s",
            child.get("kind"),
            namespace,
            child["metadata"]["name"],
            event.get("type"),
            owner,
        )
        outcome = state.reconciler.reconcile(cluster, apply=True)
        state.kube.patch_status(cluster, outcome.status)
    except _EXPECTED_FAILURES as exc:
        logger.warning("repair of %s/%s deferred to the resync: %s", namespace, owner, exc)


@kopf.on.event("", "v1", "pods", labels=BROKER_POD_LABELS)
def broker_pod_event(event: Mapping[str, Any], body: kopf.Body, memo: Any, **_: Any) -> None:
    """A broker pod deleted, or its container restarted: release its dead leases."""
    pod = _plain(body)
    try:
        if event.get("type") == "DELETED":
            _state(memo).cleaner.pod_deleted(pod)
        else:
            _state(memo).cleaner.pod_changed(pod)
    except _EXPECTED_FAILURES as exc:
        logger.warning(
            "cleanup for pod %s deferred to the sweeper: %s", pod["metadata"]["name"], exc
        )


@kopf.on.event("", "v1", "nodes")
def node_event(event: Mapping[str, Any], body: kopf.Body, memo: Any, **_: Any) -> None:
    """A Node deleted or tainted out-of-service: its broker pods are dead.

    A NotReady (unreachable) Node is deliberately ignored: its pods may still run.
    """
    if event.get("type") == "DELETED":
        why = "node deleted"
    elif node_is_out_of_service(body):
        why = "node out of service"
    else:
        return
    state = _state(memo)
    node_name = body["metadata"]["name"]
    # With watched namespaces the operator may only list pods in those (namespaced RBAC).
    watched = memo.get(WATCHED_NAMESPACES, ()) if isinstance(memo, Mapping) else ()
    pods: list[dict[str, Any]] = []
    try:
        for namespace in watched or (None,):
            pods += state.kube.pods_on_node(node_name, BROKER_POD_SELECTOR, namespace)
    except KubeError as exc:
        logger.warning("cannot list pods of node %s: %s", node_name, exc)
        return
    for pod in pods:
        try:
            state.cleaner.pod_deleted(pod, why=why)
        except _EXPECTED_FAILURES as exc:
            logger.warning("cleanup for pod %s deferred: %s", pod["metadata"]["name"], exc)
