"""Kubernetes Events on an XmqCluster (posted directly, so sync handlers can emit them)."""

from __future__ import annotations

import logging
import secrets
from datetime import UTC, datetime
from typing import Any, Literal

from xmq_operator.conditions import rfc3339
from xmq_operator.kube_api import KubeApi, KubeError, collection_path
from xmq_operator.naming import MANAGED_BY

logger = logging.getLogger(__name__)


def post_event(
    kube: KubeApi,
    involved: dict[str, Any],
    kind: Literal["Normal", "Warning"],
    reason: str,
    message: str,
) -> None:
    """Post one Event about ``involved`` (failures are logged, never raised)."""
    metadata = involved.get("metadata", {})
    namespace = metadata.get("namespace") or "default"
    now = rfc3339(datetime.now(UTC))
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{metadata.get('name', 'xmq')}.{secrets.token_hex(8)}",
            "namespace": namespace,
        },
        "involvedObject": {
            "apiVersion": involved.get("apiVersion"),
            "kind": involved.get("kind"),
            "name": metadata.get("name"),
            "namespace": namespace,
            "uid": metadata.get("uid"),
        },
        "type": kind,
        "reason": reason,
        "message": message[:1000],
        "source": {"component": MANAGED_BY},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        kube.request("POST", collection_path("v1", "Event", namespace), body=event)
    except KubeError as exc:
        logger.warning("could not post event %s: %s", reason, exc)
