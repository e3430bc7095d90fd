"""The XmqCluster CRD on a real API server: accepted specs get defaults, nonsense is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scripts.k8s.cluster import ControlPlane, KubectlError
from tests.k8s.test_operator_harness import cluster_manifest

CRD = Path(__file__).resolve().parents[2] / "crds" / "xmqcluster.yaml"


@pytest.fixture(scope="module")
def crd(k8s_cluster: ControlPlane) -> ControlPlane:
    k8s_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", CRD)
    k8s_cluster.kubectl(
        "wait", "--for=condition=Established", "crd/xmqclusters.xmq.io", "--timeout=60s"
    )
    return k8s_cluster


def _dry_run(plane: ControlPlane, body: dict[str, Any]) -> Any:
    return plane.kubectl(
        "apply", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(body)
    )


def test_a_minimal_spec_is_accepted_with_the_schema_defaults(
    crd: ControlPlane, k8s_namespace: str
) -> None:
    body = cluster_manifest("prod", k8s_namespace)
    del body["spec"]["updateStrategy"]
    spec = json.loads(_dry_run(crd, body).stdout)["spec"]
    assert spec["replicas"] == 4
    assert spec["image"] == "xmq:0.1.0"
    assert "c5n.2xlarge" in spec["placement"]["instanceTypes"]
    assert spec["placement"]["onePerNode"] is True
    assert spec["placement"]["zones"]["mode"] == "Spread"
    assert spec["updateStrategy"] == {
        "minReadySeconds": 10,
        "drainTimeoutSeconds": 60,
        "stuckPodTimeoutSeconds": 600,
    }
    assert spec["podDisruptionBudget"] == {"enabled": True, "maxUnavailable": 1}
    assert spec["listeners"]["mqtt"]["port"] == 1884


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"replicas": -1}, "spec.replicas"),
        ({"replicas": 1000}, "spec.replicas"),
        ({"redis": None}, "spec.redis"),
        ({"placement": {"zones": {"mode": "Pinned"}}}, "zones.zone is required"),
        ({"placement": {"zones": {"mode": "Spread", "zone": "us-east-1a"}}}, "only allowed"),
        ({"placement": {"zones": {"mode": "Everywhere"}}}, "Unsupported value"),
        ({"listeners": {"tls": {"enabled": True}}}, "tls.secretName is required"),
        ({"listeners": {"mqtt": {"port": 70000}}}, "spec.listeners.mqtt.port"),
        ({"podDisruptionBudget": {"maxUnavailable": 4}}, "maxUnavailable must be smaller"),
        ({"updateStrategy": {"minReadySeconds": 900, "stuckPodTimeoutSeconds": 60}}, "longer than"),
        ({"image": "has space"}, "spec.image"),
        ({"imagePullPolicy": "Sometimes"}, "Unsupported value"),
        ({"resources": {"requests": {"cpu": "lots"}}}, "spec.resources.requests.cpu"),
        ({"resources": {"limits": {"memory": "-1Gi"}}}, "spec.resources.limits.memory"),
        ({"resources": {"limits": {"cpu": -2}}}, "quantities must not be negative"),
        (
            {"config": {"listeners": [{"name": "mqtt", "protocol": "tcp", "port": 1999}]}},
            "tcp listener on listeners.mqtt.port",
        ),
        (
            {
                "listeners": {"tls": {"enabled": True, "secretName": "tls"}},
                "config": {"listeners": [{"protocol": "tcp", "port": 1884}]},
            },
            "tls listener on listeners.tls.port",
        ),
        ({"config": {"listeners": [{"port": "1884"}]}}, "spec.config.listeners[0].port"),
    ],
    ids=[
        "negative-replicas",
        "too-many-replicas",
        "no-redis",
        "pinned-without-zone",
        "zone-without-pinning",
        "unknown-zone-mode",
        "tls-without-secret",
        "port-out-of-range",
        "pdb-allows-everything",
        "stuck-timeout-shorter-than-min-ready",
        "image-with-space",
        "unknown-pull-policy",
        "cpu-not-a-quantity",
        "negative-memory",
        "negative-cpu",
        "config-listener-not-on-the-service-port",
        "tls-without-a-tls-listener",
        "listener-port-not-an-integer",
    ],
)
def test_nonsense_is_refused_by_the_api_server(
    crd: ControlPlane, k8s_namespace: str, spec: dict[str, Any], message: str
) -> None:
    body = cluster_manifest("prod", k8s_namespace)
    for key, value in spec.items():
        if value is None:
            body["spec"].pop(key)
        else:
            body["spec"][key] = value
    with pytest.raises(KubectlError) as refused:
        _dry_run(crd, body)
    assert message in refused.value.stderr


def test_quantities_and_listeners_matching_spec_listeners_are_accepted(
    crd: ControlPlane, k8s_namespace: str
) -> None:
    body = cluster_manifest(
        "ok",
        k8s_namespace,
        resources={"requests": {"cpu": "1500m", "memory": "16Gi"}, "limits": {"cpu": 2}},
        listeners={"mqtt": {"port": 1999}, "tls": {"enabled": True, "secretName": "tls"}},
        config={
            "listeners": [
                {"name": "mqtt", "port": 1999},  # protocol defaults to tcp
                {"name": "mqtts", "protocol": "tls", "port": 8883, "tls": {"cert_file": "c"}},
                {"name": "ws", "protocol": "ws", "port": 8080},
            ]
        },
    )
    spec = json.loads(_dry_run(crd, body).stdout)["spec"]
    assert spec["config"]["listeners"][1]["tls"] == {"cert_file": "c"}  # unknown fields kept
    assert spec["resources"]["requests"]["cpu"] == "1500m"


def test_short_name_and_printer_columns(crd: ControlPlane, k8s_namespace: str) -> None:
    crd.apply(cluster_manifest("columns", k8s_namespace), namespace=k8s_namespace)
    header = crd.kubectl("get", "xmq", "-n", k8s_namespace).stdout.splitlines()[0].split()
    assert header[:5] == ["NAME", "READY", "REPLICAS", "READY", "REPLICAS"]
    assert header[-1] == "AGE"
    crd.kubectl("delete", "xmq", "columns", "-n", k8s_namespace, "--wait=false")
