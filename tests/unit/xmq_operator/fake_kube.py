"""An in-memory stand-in for the operator's KubeApi (unit tests only: no API server here)."""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable
from typing import Any

from xmq.contract import ClusterKeys
from xmq_operator.kube_api import KubeError
from xmq_operator.redis_state import LeaseSnapshot


def pod(
    name: str, template_hash: str = "t", *, ready: bool = True, uid: str = ""
) -> dict[str, Any]:
    """A Running broker pod of the cluster ``prod`` in ``mq``, Ready since long ago."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "mq",
            "uid": uid or f"uid-{name}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"xmq.io/template-hash": template_hash},
            "labels": {"app.kubernetes.io/instance": "prod"},
        },
        "spec": {"nodeName": "n1"},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        },
    }


class FakeKube:
    """Objects by (kind, name) in one namespace; records applies, evictions and Events."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.applied: list[tuple[str, str]] = []
        self.evicted: list[str] = []
        self.events: list[dict[str, Any]] = []
        """Events listed (e.g. the StatefulSet's FailedCreate)."""
        self.posted: list[dict[str, Any]] = []
        """Events the operator posted."""
        self.refuse_evictions = False

    def add(self, obj: dict[str, Any]) -> None:
        self.objects[(obj["kind"], obj["metadata"]["name"])] = copy.deepcopy(obj)

    def get_optional(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        found = self.objects.get((kind, name))
        return copy.deepcopy(found) if found is not None else None

    def list_objects(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        if kind == "Event":
            return copy.deepcopy(self.events)
        return [copy.deepcopy(obj) for (k, _), obj in sorted(self.objects.items()) if k == kind]

    def list_clusters(self) -> list[dict[str, Any]]:
        return self.list_objects("xmq.io/v1alpha1", "XmqCluster", "")

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.applied.append((manifest["kind"], manifest["metadata"]["name"]))
        before = self.objects.get((manifest["kind"], manifest["metadata"]["name"]))
        self.add(manifest)
        stored = self.objects[(manifest["kind"], manifest["metadata"]["name"])]["metadata"]
        stored["creationTimestamp"] = (
            (before or {}).get("metadata", {}).get("creationTimestamp", "2026-06-01T00:00:00Z")
        )
        return manifest

    def delete(self, api_version: str, kind: str, namespace: str, name: str, **_: Any) -> bool:
        return self.objects.pop((kind, name), None) is not None

    def evict(self, namespace: str, name: str, uid: str) -> bool:
        if self.refuse_evictions:
            raise KubeError(429, "Too Many Requests", "Cannot evict pod: disruption budget")
        found = self.objects.get(("Pod", name))
        if found is None or found["metadata"]["uid"] != uid:
            return False
        self.evicted.append(name)
        found["metadata"]["deletionTimestamp"] = "2099-01-01T00:00:00Z"
        return True

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if method == "POST" and path.endswith("/events"):
            self.posted.append(kwargs["body"])
            return kwargs["body"]
        raise AssertionError(f"unexpected request {method} {path}")


class FakeClusterRedis:
    """A cluster's Redis as the reconciler sees it: owner check and lease snapshot."""

    def __init__(self, cluster_name: str, owner: str | None) -> None:
        self.keys = ClusterKeys(cluster_name)
        self.owner = owner

    def ensure_owner(
        self, cluster_uid: str, known_uids: Callable[[], set[str] | None]
    ) -> str | None:
        if self.owner is None:
            self.owner = cluster_uid
        return None if self.owner == cluster_uid else self.owner

    def snapshot(self) -> LeaseSnapshot:
        return LeaseSnapshot(frozenset(), ())


class FakeRedisPool:
    """Hands out one :class:`FakeClusterRedis` per cluster name."""

    def __init__(self, owner: str | None = None) -> None:
        self.owner = owner
        self.clusters: dict[str, FakeClusterRedis] = {}

    def cluster(self, url: str, cluster_name: str) -> FakeClusterRedis:
        return self.clusters.setdefault(cluster_name, FakeClusterRedis(cluster_name, self.owner))


def redis_secret() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "redis", "namespace": "mq"},
        "data": {"url": base64.b64encode(b"redis://127.0.0.1:1/0").decode()},
    }
