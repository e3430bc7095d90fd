"""Manifests of the XmqCluster's children other than the StatefulSet (pure functions)."""

from __future__ import annotations

from typing import Any

from xmq.contract import pod as pod_contract
from xmq_operator.naming import CONFIG_REVISION_LABEL, ClusterNames, owner_reference
from xmq_operator.spec import ClusterSpec


def _metadata(
    names: ClusterNames, name: str, body: dict[str, Any], labels: dict[str, str]
) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": names.namespace,
        "labels": labels,
        "ownerReferences": [owner_reference(body)],
    }


def config_map(
    names: ClusterNames,
    body: dict[str, Any],
    labels: dict[str, str],
    config_text: str,
    revision: str,
) -> dict[str, Any]:
    """The immutable ConfigMap of one config revision (its name ends with the revision).

    Pods mount their revision: a roll never changes a running pod's file, and reverting the
    spec brings back the same name (the last revisions are kept, see ``REVISIONS_KEPT``).
    """
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(
            names,
            names.config_revision(revision),
            body,
            {**labels, CONFIG_REVISION_LABEL: revision},
        ),
        "immutable": True,
        "data": {pod_contract.CONFIG_FILE_NAME: config_text},
    }


def _client_ports(spec: ClusterSpec) -> list[dict[str, Any]]:
    ports: list[dict[str, Any]] = [
        {"name": "mqtt", "port": spec.listeners.mqtt.port, "targetPort": "mqtt", "protocol": "TCP"}
    ]
    if spec.listeners.tls.enabled:
        ports.append(
            {
                "name": "mqtts",
                "port": spec.listeners.tls.port,
                "targetPort": "mqtts",
                "protocol": "TCP",
            }
        )
    return ports


def client_service(
    names: ClusterNames, body: dict[str, Any], labels: dict[str, str], spec: ClusterSpec
) -> dict[str, Any]:
    """The Service clients connect to (MQTT and, when enabled, MQTT over TLS)."""
    metadata = _metadata(names, names.client_service, body, labels)
    if spec.listeners.service.annotations:
        metadata["annotations"] = dict(spec.listeners.service.annotations)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": spec.listeners.service.type,
            "selector": names.selector_labels(),
            "ports": _client_ports(spec),
        },
    }


def headless_service(
    names: ClusterNames, body: dict[str, Any], labels: dict[str, str], spec: ClusterSpec
) -> dict[str, Any]:
    """The headless Service giving each pod a stable DNS name (peer discovery).

    Not-ready pods are published too: peers must find a starting node to link with it.
    """
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(names, names.headless_service, body, labels),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": names.selector_labels(),
            "ports": [
                {
                    "name": "cluster",
                    "port": pod_contract.CLUSTER_LINK_PORT,
                    "targetPort": "cluster",
                    "protocol": "TCP",
                },
                *_client_ports(spec),
            ],
        },
    }


def pod_disruption_budget(
    names: ClusterNames, body: dict[str, Any], labels: dict[str, str], spec: ClusterSpec
) -> dict[str, Any]:
    """The PodDisruptionBudget: voluntary evictions never take more than maxUnavailable."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(names, names.pdb, body, labels),
        "spec": {
            "maxUnavailable": spec.pod_disruption_budget.max_unavailable,
            "selector": {"matchLabels": names.selector_labels()},
            # An unready broker serves nobody: evicting it (a stuck pod, a roll replacing an
            # unready outdated pod, a drain) never costs availability.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
