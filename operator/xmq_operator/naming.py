"""Names, labels and annotations of everything the operator creates for an XmqCluster."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xmq_operator.spec import API_GROUP, API_VERSION, KIND

MANAGED_BY = "xmq-operator"
FIELD_MANAGER = "xmq-operator"

PAUSED_ANNOTATION = f"{API_GROUP}/paused"
"""``"true"`` on an XmqCluster stops reconciling its children (dead-pod cleanup continues)."""
RESTART_ANNOTATION = f"{API_GROUP}/restartedAt"
"""Any new value on an XmqCluster rolls every pod (like ``kubectl rollout restart``)."""
CONFIG_HASH_ANNOTATION = f"{API_GROUP}/config-hash"
"""On the pod template: hash of the restart-relevant broker config."""
TEMPLATE_HASH_ANNOTATION = f"{API_GROUP}/template-hash"
"""On the pod template: hash of the whole pod template; a pod with another value is outdated."""

CONFIG_REVISION_LABEL = f"{API_GROUP}/config-revision"
"""On each revisioned ConfigMap: the hash of its whole config file (also its name's suffix)."""

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_VERSION = "app.kubernetes.io/version"

BROKER_COMPONENT = "broker"


def is_paused(annotations: dict[str, str] | None) -> bool:
    """Whether the pause annotation is set to a true value."""
    value = (annotations or {}).get(PAUSED_ANNOTATION, "")
    return value.strip().lower() in {"true", "1", "yes"}


@dataclass(frozen=True, slots=True)
class ClusterNames:
    """Names of the children of the XmqCluster ``name`` in ``namespace``."""

    name: str
    namespace: str

    @property
    def statefulset(self) -> str:
        return self.name

    @property
    def client_service(self) -> str:
        return self.name

    @property
    def headless_service(self) -> str:
        return f"{self.name}-peers"

    @property
    def config_map(self) -> str:
        return f"{self.name}-config"

    def config_revision(self, revision: str) -> str:
        """Name of the immutable ConfigMap of config ``revision``."""
        return f"{self.config_map}-{revision}"

    def config_revisions_selector(self) -> str:
        """Label selector of every revisioned ConfigMap of the cluster."""
        return f"{LABEL_INSTANCE}={self.name},{CONFIG_REVISION_LABEL}"

    @property
    def pdb(self) -> str:
        return self.name

    @property
    def default_redis_cluster_name(self) -> str:
        """Name of the cluster in Redis keys, unique per namespace and XmqCluster."""
        return f"{self.namespace}.{self.name}"

    def selector_labels(self) -> dict[str, str]:
        """Labels selecting the cluster's broker pods (immutable on the StatefulSet)."""
        return {
            LABEL_NAME: "xmq",
            LABEL_INSTANCE: self.name,
            LABEL_COMPONENT: BROKER_COMPONENT,
        }

    def labels(self, version: str | None = None) -> dict[str, str]:
        """Labels of every child object (and of the pods)."""
        labels = {
            **self.selector_labels(),
            LABEL_MANAGED_BY: MANAGED_BY,
            LABEL_PART_OF: "xmq",
        }
        if version:
            labels[LABEL_VERSION] = version[:63]
        return labels

    def selector(self) -> str:
        """The label selector string (``status.selector``, for the scale subresource)."""
        return ",".join(f"{key}={value}" for key, value in sorted(self.selector_labels().items()))


def owner_reference(body: dict[str, Any]) -> dict[str, Any]:
    """An owner reference (controller) to the XmqCluster ``body`` for garbage collection."""
    metadata = body["metadata"]
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def image_version(image: str) -> str | None:
    """The tag of ``image`` (for the version label), if it has a valid one."""
    last = image.rsplit("/", 1)[-1]
    if "@" in last or ":" not in last:
        return None
    tag = last.rsplit(":", 1)[1]
    allowed = all(ch.isalnum() or ch in "._-" for ch in tag)
    return tag if tag and allowed and len(tag) <= 63 else None
