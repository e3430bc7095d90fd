"""The broker StatefulSet (``OnDelete``: the operator decides when each pod is replaced)."""

from __future__ import annotations

import math
from typing import Any

from xmq.contract import pod as pod_contract
from xmq_operator.broker_config import stable_hash
from xmq_operator.naming import (
    CONFIG_HASH_ANNOTATION,
    RESTART_ANNOTATION,
    TEMPLATE_HASH_ANNOTATION,
    ClusterNames,
    owner_reference,
)
from xmq_operator.spec import ClusterSpec

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"
BROKER_CONTAINER = "broker"
GRACE_MARGIN_SECONDS = 15


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _cpu_cores(quantity: int | str | None) -> float | None:
    """A Kubernetes CPU quantity (``2``, ``"1.5"``, ``"500m"``) in cores; None if unset/odd."""
    if quantity is None:
        return None
    text = str(quantity).strip()
    try:
        return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        return None


def pod_workers(spec: ClusterSpec) -> int:
    """Broker processes per pod: ``spec.workers``, else one per CPU of the container's limit
    (or request), rounded up; 0 when neither is set (the broker then counts the CPUs it sees).
    """
    if spec.workers:
        return spec.workers
    cores = _cpu_cores(spec.resources.limits.get("cpu"))
    if cores is None:
        cores = _cpu_cores(spec.resources.requests.get("cpu"))
    return max(1, math.ceil(cores)) if cores else 0


def _env(spec: ClusterSpec, cluster_uid: str) -> list[dict[str, Any]]:
    env = [
        {"name": pod_contract.CLUSTER_UID_ENV, "value": cluster_uid},
        _field_env(pod_contract.POD_NAME_ENV, "metadata.name"),
        _field_env(pod_contract.POD_UID_ENV, "metadata.uid"),
        _field_env(pod_contract.POD_NAMESPACE_ENV, "metadata.namespace"),
        _field_env(pod_contract.POD_IP_ENV, "status.podIP"),
        {"name": pod_contract.CONFIG_FILE_ENV, "value": pod_contract.CONFIG_PATH},
        {"name": pod_contract.NODE_ID_ENV, "value": f"$({pod_contract.POD_NAME_ENV})-0"},
        {"name": pod_contract.WORKERS_ENV, "value": str(pod_workers(spec))},
        _secret_env(
            pod_contract.REDIS_URL_ENV, spec.redis.secret_ref.name, spec.redis.secret_ref.key
        ),
    ]
    if spec.postgres is not None:
        ref = spec.postgres.secret_ref
        env.append(_secret_env(pod_contract.POSTGRES_DSN_ENV, ref.name, ref.key))
    return env


def _ports(spec: ClusterSpec) -> list[dict[str, Any]]:
    ports = [
        {"name": "mqtt", "containerPort": spec.listeners.mqtt.port, "protocol": "TCP"},
        {"name": "cluster", "containerPort": pod_contract.CLUSTER_LINK_PORT, "protocol": "TCP"},
        {"name": "health", "containerPort": pod_contract.HEALTH_PORT, "protocol": "TCP"},
    ]
    if spec.listeners.tls.enabled:
        ports.append({"name": "mqtts", "containerPort": spec.listeners.tls.port, "protocol": "TCP"})
    # With several workers the "health" port is the supervisor's: its probes ask every worker
    # (a wedged or dead one fails them by name). Worker w links on CLUSTER_LINK_PORT + w and
    # serves its own /metrics, /healthz and /readyz on HEALTH_PORT + 1 + w.
    workers = pod_workers(spec)
    for worker in range(workers if workers > 1 else 0):
        if worker:
            ports.append(
                {
                    "name": f"cluster-{worker}",
                    "containerPort": pod_contract.CLUSTER_LINK_PORT + worker,
                    "protocol": "TCP",
                }
            )
        ports.append(
            {
                "name": f"health-{worker}",
                "containerPort": pod_contract.HEALTH_PORT + 1 + worker,
                "protocol": "TCP",
            }
        )
    return ports


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "health"},
        "periodSeconds": period,
        "timeoutSeconds": 2,
        "failureThreshold": failures,
    }


def _container(spec: ClusterSpec, cluster_uid: str) -> dict[str, Any]:
    mounts = [{"name": "config", "mountPath": pod_contract.CONFIG_DIR, "readOnly": True}]
    if spec.listeners.tls.enabled:
        mounts.append({"name": "tls", "mountPath": pod_contract.TLS_DIR, "readOnly": True})
    if spec.link_tls is not None:
        mounts.append(
            {"name": "link-tls", "mountPath": pod_contract.LINK_TLS_DIR, "readOnly": True}
        )
    if spec.admin_token is not None:
        mounts.append(
            {"name": "admin-token", "mountPath": pod_contract.ADMIN_TOKEN_DIR, "readOnly": True}
        )
    container: dict[str, Any] = {
        "name": BROKER_CONTAINER,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": list(pod_contract.BROKER_COMMAND),
        "env": _env(spec, cluster_uid),
        "ports": _ports(spec),
        "volumeMounts": mounts,
        "startupProbe": _probe(pod_contract.LIVENESS_PATH, 2, 60),
        "livenessProbe": _probe(pod_contract.LIVENESS_PATH, 10, 3),
        "readinessProbe": _probe(pod_contract.READINESS_PATH, 5, 2),
        "lifecycle": {"preStop": {"exec": {"command": list(pod_contract.DRAIN_COMMAND)}}},
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    resources = {
        kind: dict(values)
        for kind, values in (
            ("requests", spec.resources.requests),
            ("limits", spec.resources.limits),
        )
        if values
    }
    if resources:
        container["resources"] = resources
    return container


def _node_affinity(spec: ClusterSpec) -> dict[str, Any] | None:
    expressions: list[dict[str, Any]] = []
    placement = spec.placement
    if placement.instance_types:
        expressions.append(
            {
                "key": INSTANCE_TYPE_LABEL,
                "operator": "In",
                "values": list(placement.instance_types),
            }
        )
    if placement.zones.mode == "Pinned" and placement.zones.zone:
        expressions.append({"key": ZONE_LABEL, "operator": "In", "values": [placement.zones.zone]})
    if not expressions:
        return None
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": expressions}]
        }
    }


def _affinity(spec: ClusterSpec, names: ClusterNames) -> dict[str, Any]:
    affinity: dict[str, Any] = {}
    node_affinity = _node_affinity(spec)
    if node_affinity is not None:
        affinity["nodeAffinity"] = node_affinity
    if spec.placement.one_per_node:
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": names.selector_labels()},
                    "topologyKey": HOSTNAME_LABEL,
                }
            ]
        }
    return affinity


def pod_template(
    spec: ClusterSpec,
    names: ClusterNames,
    labels: dict[str, str],
    *,
    config_hash: str,
    restarted_at: str | None,
    cluster_uid: str,
    config_map: str,
) -> dict[str, Any]:
    """The pod template, with the template hash the roll compares pods against.

    The hash is taken with the config volume naming the base ConfigMap name: the revision
    ``config_map`` differs for a ``log``-only change, which must not roll pods (``config_hash``
    covers every restart-relevant change).
    """
    annotations = {CONFIG_HASH_ANNOTATION: config_hash}
    if restarted_at:
        annotations[RESTART_ANNOTATION] = restarted_at
    pod_spec: dict[str, Any] = {
        "containers": [_container(spec, cluster_uid)],
        "affinity": _affinity(spec, names),
        "terminationGracePeriodSeconds": (
            spec.update_strategy.drain_timeout_seconds + GRACE_MARGIN_SECONDS
        ),
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "runAsGroup": 10001,
            "fsGroup": 10001,
            # Pod Security "restricted": the runtime's default seccomp profile.
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumes": [{"name": "config", "configMap": {"name": names.config_map}}],
    }
    if spec.listeners.tls.enabled and spec.listeners.tls.secret_name:
        pod_spec["volumes"].append(
            {"name": "tls", "secret": {"secretName": spec.listeners.tls.secret_name}}
        )
    if spec.link_tls is not None:
        pod_spec["volumes"].append(
            {"name": "link-tls", "secret": {"secretName": spec.link_tls.secret_name}}
        )
    if spec.admin_token is not None:  # only the token, as the file the config names
        token_name = pod_contract.ADMIN_TOKEN_FILE.rsplit("/", 1)[1]
        secret = {
            "secretName": spec.admin_token.secret_name,
            "items": [{"key": spec.admin_token.key, "path": token_name}],
        }
        pod_spec["volumes"].append({"name": "admin-token", "secret": secret})
    if spec.placement.node_selector:
        pod_spec["nodeSelector"] = dict(spec.placement.node_selector)
    if spec.placement.tolerations:
        pod_spec["tolerations"] = [dict(item) for item in spec.placement.tolerations]
    if spec.placement.priority_class_name:
        pod_spec["priorityClassName"] = spec.placement.priority_class_name
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in spec.image_pull_secrets]
    if spec.placement.zones.mode == "Spread":
        pod_spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE_LABEL,
                "whenUnsatisfiable": spec.placement.zones.when_unsatisfiable,
                "labelSelector": {"matchLabels": names.selector_labels()},
            }
        ]
    template = {"metadata": {"labels": dict(labels), "annotations": annotations}, "spec": pod_spec}
    annotations[TEMPLATE_HASH_ANNOTATION] = stable_hash(template)
    pod_spec["volumes"][0] = {"name": "config", "configMap": {"name": config_map}}
    return template


def statefulset(
    spec: ClusterSpec,
    names: ClusterNames,
    body: dict[str, Any],
    labels: dict[str, str],
    template: dict[str, Any],
) -> dict[str, Any]:
    """The StatefulSet owning the broker pods; ``OnDelete``, parallel pod management."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": names.statefulset,
            "namespace": names.namespace,
            "labels": dict(labels),
            "ownerReferences": [owner_reference(body)],
        },
        "spec": {
            "replicas": spec.replicas,
            "serviceName": names.headless_service,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": names.selector_labels()},
            "template": template,
        },
    }
