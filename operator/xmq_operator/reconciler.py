"""One reconciliation of an XmqCluster: children, roll step, observation, status.

The kopf handlers (:mod:`xmq_operator.handlers`) are thin wrappers around this class.
Nothing here raises for a bad spec, a missing Secret or an unreachable Redis: those become a
``Degraded`` condition with a reason, and the caller re-checks later.
"""

from __future__ import annotations

import base64
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from xmq_operator import manifests
from xmq_operator.broker_config import (
    InvalidBrokerConfigError,
    build_broker_config,
    config_yaml,
    redis_cluster_name,
    restart_hash,
    validate_broker_config,
)
from xmq_operator.events import post_event
from xmq_operator.kube_api import KubeApi, KubeError
from xmq_operator.naming import (
    RESTART_ANNOTATION,
    TEMPLATE_HASH_ANNOTATION,
    ClusterNames,
    image_version,
    is_paused,
)
from xmq_operator.redis_state import ClusterRedis, RedisPool, RedisUnavailableError
from xmq_operator.rollout import Action, RollDecision, RollPolicy, plan_roll, pod_view
from xmq_operator.spec import ClusterSpec
from xmq_operator.statefulset import pod_template, statefulset
from xmq_operator.status import Observation, Problem, status_patch

logger = logging.getLogger(__name__)

STEADY_RECHECK_SECONDS = 30.0


@dataclass(slots=True)
class Outcome:
    """What one reconciliation decided: the status to write and when to look again."""

    status: dict[str, Any]
    retry_after: float | None
    problems: list[Problem] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Desired:
    """The rendered children of a valid spec."""

    spec: ClusterSpec
    cluster_name: str
    config_hash: str
    template_hash: str
    children: tuple[dict[str, Any], ...]
    statefulset: dict[str, Any]


def secret_value(kube: KubeApi, namespace: str, name: str, key: str) -> str:
    """A Secret's value, or raise :class:`LookupError` naming what is missing."""
    secret = kube.get_optional("v1", "Secret", namespace, name)
    if secret is None:
        raise LookupError(f"Secret {namespace}/{name} not found")
    data = secret.get("data") or {}
    if key not in data:
        raise LookupError(f"Secret {namespace}/{name} has no key {key!r}")
    return base64.b64decode(data[key]).decode()


def parse_spec(body: dict[str, Any]) -> ClusterSpec:
    return ClusterSpec.model_validate(body.get("spec") or {})


def render(body: dict[str, Any], spec: ClusterSpec) -> Desired:
    """Every child manifest of the cluster (raises InvalidBrokerConfigError)."""
    metadata = body["metadata"]
    names = ClusterNames(metadata["name"], metadata["namespace"])
    labels = names.labels(image_version(spec.image))
    cluster_name = redis_cluster_name(spec, names)
    config = build_broker_config(spec, cluster_name)
    validate_broker_config(config)
    config_hash = restart_hash(config)
    restarted_at = (metadata.get("annotations") or {}).get(RESTART_ANNOTATION)
    template = pod_template(
        spec,
        names,
        labels,
        config_hash=config_hash,
        restarted_at=restarted_at,
    )
    children = [
        manifests.config_map(names, body, labels, config_yaml(config)),
        manifests.headless_service(names, body, labels, spec),
        manifests.client_service(names, body, labels, spec),
    ]
    if spec.pod_disruption_budget.enabled:
        children.append(manifests.pod_disruption_budget(names, body, labels, spec))
    return Desired(
        spec=spec,
        cluster_name=cluster_name,
        config_hash=config_hash,
        template_hash=template["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION],
        children=tuple(children),
        statefulset=statefulset(spec, names, body, labels, template),
    )


class Reconciler:
    """Reconciles XmqClusters through a :class:`KubeApi` and a :class:`RedisPool`."""

    def __init__(self, kube: KubeApi, redis_pool: RedisPool) -> None:
        self.kube = kube
        self.redis_pool = redis_pool

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

    def roll_step(
        self, body: dict[str, Any], desired: Desired, pods: list[dict[str, Any]], now: float
    ) -> RollDecision:
        """Plan the roll and, when the plan says so, delete one pod (drained by preStop)."""
        strategy = desired.spec.update_strategy
        policy = RollPolicy(
            replicas=desired.spec.replicas,
            desired_hash=desired.template_hash,
            min_ready_seconds=strategy.min_ready_seconds,
            stuck_pod_timeout_seconds=strategy.stuck_pod_timeout_seconds,
        )
        decision = plan_roll([pod_view(pod) for pod in pods], policy, now)
        if decision.action is Action.DELETE and decision.pod is not None:
            target = next(pod for pod in pods if pod["metadata"]["name"] == decision.pod)
            namespace = target["metadata"]["namespace"]
            uid = target["metadata"]["uid"]
            if self.kube.delete("v1", "Pod", namespace, decision.pod, uid=uid):
                logger.info("roll: deleted pod %s/%s: %s", namespace, decision.pod, decision.reason)
                post_event(self.kube, body, "Normal", "RollingPod", decision.reason)
        return decision

    # -- the whole thing -------------------------------------------------------------------

    def reconcile(self, body: dict[str, Any], *, apply: bool) -> Outcome:
        """Reconcile (``apply``: write children and take a roll step) and compute the status."""
        metadata = body["metadata"]
        names = ClusterNames(metadata["name"], metadata["namespace"])
        paused = is_paused(metadata.get("annotations"))
        generation = int(metadata.get("generation") or 0)
        problems: list[Problem] = []
        retry_after: float | None = None
        now = time.time()
        try:
            spec = parse_spec(body)
        except ValidationError as exc:
            problem = Problem("InvalidSpec", f"spec is invalid: {exc.errors()[0]['msg']}")
            return self._finish(body, names, None, [problem], paused, None, None, generation)

        problems.extend(self.check_secrets(names.namespace, spec))
        desired: Desired | None = None
        try:
            desired = render(body, spec)
        except InvalidBrokerConfigError as exc:
            problems.append(Problem("InvalidConfig", str(exc)))

        decision: RollDecision | None = None
        if desired is not None and apply and not paused:
            try:
                self.apply_children(desired)
            except KubeError as exc:
                problems.append(Problem("ApplyFailed", str(exc)))
        pods = self.pods(names)
        if desired is not None and not paused:
            if apply and not any(p.reason == "ApplyFailed" for p in problems):
                decision = self.roll_step(body, desired, pods, now)
                if decision.action is Action.DELETE:
                    pods = self.pods(names)
            else:
                policy = RollPolicy(
                    spec.replicas,
                    desired.template_hash,
                    spec.update_strategy.min_ready_seconds,
                    spec.update_strategy.stuck_pod_timeout_seconds,
                )
                decision = plan_roll([pod_view(pod) for pod in pods], policy, now)
            if decision.in_progress:
                retry_after = decision.retry_after or 2.0

        members: list[str] | None = None
        try:
            members = self.cluster_redis(body, spec).snapshot().alive
        except LookupError:
            pass  # already reported as MissingSecret
        except RedisUnavailableError as exc:
            problems.append(Problem("RedisUnreachable", f"Redis unreachable: {exc}"))
        except InvalidBrokerConfigError as exc:
            problems.append(Problem("InvalidConfig", str(exc)))

        if problems and retry_after is None:
            retry_after = STEADY_RECHECK_SECONDS
        outcome = self._finish(
            body, names, desired, problems, paused, decision, pods, generation, members
        )
        outcome.retry_after = retry_after
        return outcome

    def _finish(
        self,
        body: dict[str, Any],
        names: ClusterNames,
        desired: Desired | None,
        problems: list[Problem],
        paused: bool,
        decision: RollDecision | None,
        pods: list[dict[str, Any]] | None,
        generation: int,
        members: list[str] | None = None,
    ) -> Outcome:
        views = [pod_view(pod) for pod in pods or []]
        spec_replicas = int((body.get("spec") or {}).get("replicas", 0) or 0)
        if desired is not None:
            spec_replicas = desired.spec.replicas
        current = [view for view in views if not view.terminating]
        extra: dict[str, Any] = {"selector": names.selector()}
        if desired is not None:
            extra.update(
                configHash=desired.config_hash,
                templateHash=desired.template_hash,
                clusterName=desired.cluster_name,
            )
        if decision is not None:
            extra["rollout"] = {"reason": decision.reason, "pod": decision.pod or ""}
        updated = sum(
            1
            for view in current
            if desired is not None and view.template_hash == desired.template_hash
        )
        obs = Observation(
            replicas=spec_replicas,
            ready_replicas=sum(1 for view in current if view.ready),
            updated_replicas=updated,
            current_replicas=len(current),
            paused=paused,
            roll=decision,
            problems=problems,
            members=members,
            extra=extra,
        )
        status = status_patch(body.get("status"), obs, generation, datetime.now(UTC))
        return Outcome(status=status, retry_after=None, problems=problems)
