"""A small synchronous Kubernetes API client on top of the ``kubernetes`` package.

Bodies in and out are plain dicts (no generated models); children are written with
server-side apply, so re-applying an unchanged manifest changes nothing.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Iterator
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from xmq_operator.naming import FIELD_MANAGER
from xmq_operator.spec import API_GROUP, API_VERSION, PLURAL


class KubeError(RuntimeError):
    """The API server answered with an error status."""

    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(f"{status} {reason}: {body[:500]}")
        self.status = status
        self.reason = reason
        self.body = body

    @property
    def not_found(self) -> bool:
        return self.status == 404


_PATHS = {
    ("v1", "ConfigMap"): "/api/v1/namespaces/{ns}/configmaps",
    ("v1", "Service"): "/api/v1/namespaces/{ns}/services",
    ("v1", "Pod"): "/api/v1/namespaces/{ns}/pods",
    ("v1", "Secret"): "/api/v1/namespaces/{ns}/secrets",
    ("v1", "Event"): "/api/v1/namespaces/{ns}/events",
    ("apps/v1", "StatefulSet"): "/apis/apps/v1/namespaces/{ns}/statefulsets",
    ("policy/v1", "PodDisruptionBudget"): "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    (f"{API_GROUP}/{API_VERSION}", "XmqCluster"): (
        f"/apis/{API_GROUP}/{API_VERSION}/namespaces/{{ns}}/{PLURAL}"
    ),
}


def load_configuration() -> None:
    """Configure the default client: in-cluster service account, else the kubeconfig."""
    try:
        k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
    except k8s_config.ConfigException:
        # KUBECONFIG is read now, not when the kubernetes package was imported.
        k8s_config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))  # type: ignore[no-untyped-call]


def collection_path(api_version: str, kind: str, namespace: str) -> str:
    return _PATHS[(api_version, kind)].format(ns=urllib.parse.quote(namespace, safe=""))


class KubeApi:
    """The calls the operator makes."""

    def __init__(self, api_client: k8s_client.ApiClient | None = None) -> None:
        self._client = api_client or k8s_client.ApiClient()

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: object = None,
        content_type: str = "application/json",
    ) -> Any:
        """One API call; returns the decoded JSON answer or raises :class:`KubeError`."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        serialized = self._client.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        http_method, url, header_params, request_body, post_params = serialized
        response = self._client.call_api(
            http_method,
            url,
            header_params=header_params,
            body=request_body,
            post_params=post_params,
            _request_timeout=30,
        )
        raw = response.read()  # type: ignore[no-untyped-call]
        text = raw.decode() if isinstance(raw, bytes) else str(raw or "")
        if response.status >= 400:
            raise KubeError(response.status, str(response.reason), text)
        return json.loads(text) if text else None

    # -- generic ---------------------------------------------------------------------------

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply ``manifest`` (force: the operator owns these fields)."""
        metadata = manifest["metadata"]
        path = collection_path(manifest["apiVersion"], manifest["kind"], metadata["namespace"])
        result: dict[str, Any] = self.request(
            "PATCH",
            f"{path}/{urllib.parse.quote(metadata['name'], safe='')}",
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
            body=manifest,
            content_type="application/apply-patch+yaml",
        )
        return result

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
        path = collection_path(api_version, kind, namespace)
        result: dict[str, Any] = self.request("GET", f"{path}/{urllib.parse.quote(name, safe='')}")
        return result

    def get_optional(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        try:
            return self.get(api_version, kind, namespace, name)
        except KubeError as exc:
            if exc.not_found:
                return None
            raise

    def list_objects(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        query: dict[str, str] = {}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        result = self.request("GET", collection_path(api_version, kind, namespace), query=query)
        items: list[dict[str, Any]] = result.get("items") or []
        return items

    def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
    ) -> bool:
        """Delete an object (only the one with ``uid`` when given); False if already gone."""
        path = collection_path(api_version, kind, namespace)
        body: dict[str, Any] | None = None
        if uid:
            body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}}
        return self._unless_gone("DELETE", f"{path}/{urllib.parse.quote(name, safe='')}", body)

    def _unless_gone(self, method: str, path: str, body: dict[str, Any] | None) -> bool:
        """Make the call; False when the object is gone (404) or replaced (409, uid)."""
        try:
            self.request(method, path, body=body)
        except KubeError as exc:
            if exc.not_found or exc.status == 409:
                return False
            raise
        return True

    # -- specific --------------------------------------------------------------------------

    def evict(self, namespace: str, name: str, uid: str) -> bool:
        """Evict a pod through the Eviction API (policy/v1): the PDB decides.

        True when the eviction was accepted, False when the pod is already gone (or replaced);
        a :class:`KubeError` with status 429 means the PodDisruptionBudget refuses it now.
        """
        path = f"{collection_path('v1', 'Pod', namespace)}/{urllib.parse.quote(name, safe='')}"
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        return self._unless_gone("POST", f"{path}/eviction", body)

    def patch_status(self, body: dict[str, Any], status: dict[str, Any]) -> None:
        """Merge-patch the status subresource of ``body`` (an object of a known kind)."""
        metadata = body["metadata"]
        path = collection_path(body["apiVersion"], body["kind"], metadata["namespace"])
        self.request(
            "PATCH",
            f"{path}/{urllib.parse.quote(metadata['name'], safe='')}/status",
            body={"status": status},
            content_type="application/merge-patch+json",
        )

    def list_nodes(self) -> list[dict[str, Any]]:
        result = self.request("GET", "/api/v1/nodes")
        items: list[dict[str, Any]] = result.get("items") or []
        return items

    def pods_on_node(
        self, node_name: str, label_selector: str, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """Pods on ``node_name`` in every namespace, or in ``namespace`` (namespaced RBAC)."""
        query = {
            "labelSelector": label_selector,
            "fieldSelector": f"spec.nodeName={node_name}",
        }
        path = collection_path("v1", "Pod", namespace) if namespace else "/api/v1/pods"
        result = self.request("GET", path, query=query)
        items: list[dict[str, Any]] = result.get("items") or []
        return items

    def list_clusters(self) -> Iterator[dict[str, Any]]:
        result = self.request("GET", f"/apis/{API_GROUP}/{API_VERSION}/{PLURAL}")
        yield from result.get("items") or []
