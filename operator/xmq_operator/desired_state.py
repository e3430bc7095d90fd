"""The desired state of an XmqCluster: its spec parsed and every child manifest rendered.

Pure: reads the XmqCluster body (and, for :func:`secret_value`, one Secret), writes nothing.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from xmq_operator import manifests
from xmq_operator.broker_config import (
    build_broker_config,
    config_yaml,
    redis_cluster_name,
    restart_hash,
    stable_hash,
    validate_broker_config,
)
from xmq_operator.kube_api import KubeApi
from xmq_operator.naming import (
    RESTART_ANNOTATION,
    TEMPLATE_HASH_ANNOTATION,
    ClusterNames,
    image_version,
)
from xmq_operator.spec import ClusterSpec
from xmq_operator.statefulset import pod_template, statefulset


@dataclass(frozen=True, slots=True)
class Desired:
    """The rendered children of a valid spec."""

    spec: ClusterSpec
    cluster_name: str
    config_hash: str
    config_revision: str
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


def spec_error(exc: ValidationError) -> str:
    """The first error of an invalid spec, with its field path."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return (
        f"spec is invalid: {where}: {error['msg']}" if where else f"spec is invalid: {error['msg']}"
    )


def render(body: dict[str, Any], spec: ClusterSpec) -> Desired:
    """Every child manifest of the cluster (raises InvalidBrokerConfigError)."""
    metadata = body["metadata"]
    names = ClusterNames(metadata["name"], metadata["namespace"])
    labels = names.labels(image_version(spec.image))
    cluster_name = redis_cluster_name(spec, names)
    config = build_broker_config(spec, cluster_name)
    validate_broker_config(config)
    config_hash = restart_hash(config)
    revision = stable_hash(config, 10)
    restarted_at = (metadata.get("annotations") or {}).get(RESTART_ANNOTATION)
    template = pod_template(
        spec,
        names,
        labels,
        config_hash=config_hash,
        restarted_at=restarted_at,
        cluster_uid=metadata["uid"],
        config_map=names.config_revision(revision),
    )
    children = [
        manifests.config_map(names, body, labels, config_yaml(config), revision),
        manifests.headless_service(names, body, labels, spec),
        manifests.client_service(names, body, labels, spec),
    ]
    if spec.pod_disruption_budget.enabled:
        children.append(manifests.pod_disruption_budget(names, body, labels, spec))
    return Desired(
        spec=spec,
        cluster_name=cluster_name,
        config_hash=config_hash,
        config_revision=names.config_revision(revision),
        template_hash=template["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION],
        children=tuple(children),
        statefulset=statefulset(spec, names, body, labels, template),
    )
