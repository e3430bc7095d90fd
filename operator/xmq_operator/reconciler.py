"""One reconciliation of an XmqCluster: children, roll step, observation, status.

The kopf handlers (:mod:`xmq_operator.handlers`) are thin wrappers around this class. The
desired children come from :mod:`xmq_operator.desired_state`, the status from
:mod:`xmq_operator.reconcile_outcome`.
Nothing here raises for a bad spec, a missing Secret or an unreachable Redis: those become a
``Degraded`` condition with a reason, and the caller re-checks later.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from pydantic import ValidationError

from xmq_operator.broker_config import InvalidBrokerConfigError, redis_cluster_name
from xmq_operator.desired_state import Desired, parse_spec, render, secret_value, spec_error
from xmq_operator.events import post_event
from xmq_operator.kube_api import KubeApi, KubeError
from xmq_operator.naming import ClusterNames, is_paused
from xmq_operator.pod_health import creation_refusals, pod_problems
from xmq_operator.pod_steps import PodSteps
from xmq_operator.reconcile_outcome import Outcome, Seen, reconcile_outcome, template_hash_of
from xmq_operator.redis_state import ClusterRedis, RedisPool, RedisUnavailableError
from xmq_operator.rollout import Action
from xmq_operator.spec import API_GROUP, API_VERSION, KIND, ClusterSpec
from xmq_operator.status import Problem

logger = logging.getLogger(__name__)


class Reconciler:
    """Reconciles XmqClusters through a :class:`KubeApi` and a :class:`RedisPool`.

    Level-based: every call compares the children with the spec and repairs what differs, so
    kopf's change handlers, the periodic resync and the child watches may all call it; one
    lock per XmqCluster keeps two calls from taking two disruptive steps at once.
    """

    def __init__(self, kube: KubeApi, redis_pool: RedisPool) -> None:
        self.kube = kube
        self.redis_pool = redis_pool
        self.steps = PodSteps(kube)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._warned: dict[str, frozenset[str]] = {}

    def lock(self, uid: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(uid, threading.Lock())

    # -- pieces ----------------------------------------------------------------------------

    def check_secrets(self, namespace: str, spec: ClusterSpec) -> list[Problem]:
        problems: list[Problem] = []
        refs = [spec.redis.secret_ref]
        if spec.postgres is not None:
            refs.append(spec.postgres.secret_ref)
        for ref in refs:
            try:
                secret_value(self.kube, namespace, ref.name, ref.key)
            except LookupError as exc:
                problems.append(Problem("MissingSecret", str(exc)))
        tls = spec.listeners.tls
        tls_missing = (
            tls.enabled
            and tls.secret_name
            and self.kube.get_optional("v1", "Secret", namespace, tls.secret_name) is None
        )
        if tls_missing:
            problems.append(
                Problem("MissingSecret", f"TLS Secret {namespace}/{tls.secret_name} not found")
            )
        return problems

    def cluster_redis(self, body: dict[str, Any], spec: ClusterSpec) -> ClusterRedis:
        """The cluster's Redis (raises LookupError for a missing Secret)."""
        metadata = body["metadata"]
        names = ClusterNames(metadata["name"], metadata["namespace"])
        ref = spec.redis.secret_ref
        url = secret_value(self.kube, names.namespace, ref.name, ref.key)
        return self.redis_pool.cluster(url, redis_cluster_name(spec, names))

    def known_cluster_uids(self, namespace: str) -> set[str] | None:
        """UIDs of the XmqClusters this operator can see (None when it cannot list them)."""
        try:
            return {item["metadata"]["uid"] for item in self.kube.list_clusters()}
        except KubeError:
            pass
        try:
            items = self.kube.list_objects(f"{API_GROUP}/{API_VERSION}", KIND, namespace)
        except KubeError:
            return None
        return {item["metadata"]["uid"] for item in items}

    def owned_redis(self, body: dict[str, Any], spec: ClusterSpec) -> ClusterRedis:
        """The cluster's Redis once its key namespace is recorded as this XmqCluster's.

        Raises :class:`NamespaceInUseError` when another XmqCluster's UID is recorded there
        (and LookupError / Redis errors like :meth:`cluster_redis`).
        """
        metadata = body["metadata"]
        redis_state = self.cluster_redis(body, spec)
        other = redis_state.ensure_owner(
            metadata["uid"], lambda: self.known_cluster_uids(metadata["namespace"])
        )
        if other is not None:
            raise NamespaceInUseError(
                f"Redis key namespace {redis_state.keys.prefix!r} belongs to XmqCluster UID "
                f"{other}, not to this one ({metadata['uid']}): nothing is applied and no "
                "lease released; give this cluster its own spec.config.cluster.name"
            )
        return redis_state

    def pods(self, names: ClusterNames) -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in sorted(names.selector_labels().items()))
        return self.kube.list_objects("v1", "Pod", names.namespace, selector)

    def apply_children(self, desired: Desired) -> None:
        for child in (*desired.children, desired.statefulset):
            self.kube.apply(child)
        if not desired.spec.pod_disruption_budget.enabled:
            metadata = desired.statefulset["metadata"]
            self.kube.delete(
                "policy/v1", "PodDisruptionBudget", metadata["namespace"], metadata["name"]
            )

    def statefulset_events(self, names: ClusterNames) -> list[dict[str, Any]]:
        selector = f"involvedObject.kind=StatefulSet,involvedObject.name={names.statefulset}"
        try:
            return self.kube.list_objects("v1", "Event", names.namespace, field_selector=selector)
        except KubeError as exc:
            logger.debug("cannot list the StatefulSet's events: %s", exc)
            return []

    # -- the whole thing -------------------------------------------------------------------

    def reconcile(self, body: dict[str, Any], *, apply: bool) -> Outcome:
        """Reconcile (``apply``: write children and take a step) and compute the status."""
        with self.lock(body["metadata"]["uid"]):
            return self._reconcile(body, apply=apply)

    def _reconcile(self, body: dict[str, Any], *, apply: bool) -> Outcome:
        metadata = body["metadata"]
        names = ClusterNames(metadata["name"], metadata["namespace"])
        paused = is_paused(metadata.get("annotations"))
        now = time.time()
        seen = Seen()
        try:
            spec = parse_spec(body)
        except ValidationError as exc:
            seen.problems.append(Problem("InvalidSpec", spec_error(exc)))
            self._observe(names, seen, None, now)
            return self._finish(body, names, seen, paused)

        seen.problems.extend(self.check_secrets(names.namespace, spec))
        try:
            seen.desired = render(body, spec)
        except InvalidBrokerConfigError as exc:
            seen.problems.append(Problem("InvalidConfig", str(exc)))

        owner_ok = True
        try:
            seen.members = self.owned_redis(body, spec).snapshot().alive
        except NamespaceInUseError as exc:
            owner_ok = False
            seen.problems.insert(0, Problem("RedisNamespaceInUse", str(exc)))
        except LookupError:
            pass  # already reported as MissingSecret
        except RedisUnavailableError as exc:
            seen.problems.append(Problem("RedisUnreachable", f"Redis unreachable: {exc}"))
        except InvalidBrokerConfigError as exc:
            if seen.desired is not None:
                seen.problems.append(Problem("InvalidConfig", str(exc)))

        self._observe(names, seen, spec, now)
        desired = seen.desired
        if desired is not None and owner_ok and not paused:
            self._converge(body, names, seen, desired, now, apply=apply)
        return self._finish(body, names, seen, paused)

    def _observe(
        self, names: ClusterNames, seen: Seen, spec: ClusterSpec | None, now: float
    ) -> None:
        seen.live_statefulset = self.kube.get_optional(
            "apps/v1", "StatefulSet", names.namespace, names.statefulset
        )
        seen.pods = self.pods(names)
        seen.problems.extend(pod_problems(seen.pods, now))
        replicas = spec.replicas if spec is not None else 0
        live = [pod for pod in seen.pods if not pod["metadata"].get("deletionTimestamp")]
        missing = replicas - len(live)
        if missing > 0:
            events = self.statefulset_events(names)
            seen.problems.extend(creation_refusals(events, missing, now))

    def _converge(
        self,
        body: dict[str, Any],
        names: ClusterNames,
        seen: Seen,
        desired: Desired,
        now: float,
        *,
        apply: bool,
    ) -> None:
        """Apply the children and take at most one disruptive step (scale-in or roll)."""
        live = seen.live_statefulset
        live_replicas = int((live or {}).get("spec", {}).get("replicas", 0) or 0)
        wanted = desired.spec.replicas
        replicas, scale = (
            self.steps.scale_in_step(body, live_replicas, wanted, seen.pods, act=apply)
            if live is not None
            else (wanted, None)
        )
        desired.statefulset["spec"]["replicas"] = replicas
        if apply:
            try:
                self.apply_children(desired)
                seen.applied = True
            except KubeError as exc:
                seen.problems.append(Problem("ApplyFailed", str(exc)))
                return
        else:
            seen.applied = self._template_applied(live, desired)
        if scale is not None:
            seen.decision, seen.scaling_in = scale, True
            return
        seen.decision = self.steps.roll_step(
            body, desired.spec, desired.template_hash, seen.pods, now, act=apply
        )
        if seen.decision.action is Action.DELETE and apply:
            seen.pods = self.pods(names)
        if apply and seen.decision.action is Action.DONE:
            try:
                self.steps.collect_revisions(names, desired.config_revision, seen.pods)
            except KubeError as exc:
                logger.warning("could not collect old config revisions: %s", exc)

    @staticmethod
    def _template_applied(live: dict[str, Any] | None, desired: Desired) -> bool:
        return template_hash_of(live) == desired.template_hash

    def _finish(
        self, body: dict[str, Any], names: ClusterNames, seen: Seen, paused: bool
    ) -> Outcome:
        outcome = reconcile_outcome(body, names, seen, paused)
        self._warn(body, seen.problems)
        return outcome

    def _warn(self, body: dict[str, Any], problems: list[Problem]) -> None:
        """One Warning Event per problem reason that newly appeared."""
        uid = body["metadata"]["uid"]
        reasons = frozenset(problem.reason for problem in problems)
        before = self._warned.get(uid, frozenset())
        for problem in problems:
            if problem.reason not in before:
                post_event(self.kube, body, "Warning", problem.reason, problem.message)
                before = before | {problem.reason}
        self._warned[uid] = reasons

    def forget(self, uid: str) -> None:
        """Drop what is kept about a deleted XmqCluster."""
        with self._locks_guard:
            self._locks.pop(uid, None)
        self._warned.pop(uid, None)


class NamespaceInUseError(LookupError):
    """The cluster's Redis key namespace is recorded for another XmqCluster."""
