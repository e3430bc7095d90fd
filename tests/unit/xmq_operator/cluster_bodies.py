"""XmqCluster bodies for the operator's unit tests."""

from __future__ import annotations

import copy
from typing import Any


def cluster_body(
    spec: dict[str, Any] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    base_spec: dict[str, Any] = {"redis": {"secretRef": {"name": "redis", "key": "url"}}}
    base_spec.update(copy.deepcopy(spec or {}))
    return {
        "apiVersion": "xmq.io/v1alpha1",
        "kind": "XmqCluster",
        "metadata": {
            "name": "prod",
            "namespace": "mq",
            "uid": "0f6a3c2e-uid",
            "generation": 3,
            "annotations": dict(annotations or {}),
        },
        "spec": base_spec,
    }
