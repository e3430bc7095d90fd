"""The CRD manifest: structure, defaults matching the operator's model, the chart's copy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from xmq_operator.spec import (
    API_GROUP,
    API_VERSION,
    DEFAULT_IMAGE,
    DEFAULT_INSTANCE_TYPES,
    ClusterSpec,
)

ROOT = Path(__file__).resolve().parents[3]
CRD = ROOT / "crds" / "xmqcluster.yaml"


def _crd() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(CRD.read_text())
    return loaded


def _version() -> dict[str, Any]:
    (version,) = _crd()["spec"]["versions"]
    return dict(version)


def _spec_schema() -> dict[str, Any]:
    schema: dict[str, Any] = _version()["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def test_identity_scope_and_names() -> None:
    crd = _crd()
    assert crd["metadata"]["name"] == f"xmqclusters.{API_GROUP}"
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["kind"] == "XmqCluster"
    assert crd["spec"]["names"]["shortNames"] == ["xmq"]
    assert _version()["name"] == API_VERSION


def test_status_and_scale_subresources_and_printer_columns() -> None:
    version = _version()
    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    assert version["subresources"]["scale"]["labelSelectorPath"] == ".status.selector"
    columns = [column["name"] for column in version["additionalPrinterColumns"]]
    assert columns == ["Ready", "Replicas", "Ready replicas", "Age"]


def test_schema_defaults_match_the_operator_model() -> None:
    properties = _spec_schema()["properties"]
    model = ClusterSpec.model_validate({"redis": {"secretRef": {"name": "r", "key": "url"}}})
    assert properties["replicas"]["default"] == model.replicas == 4
    assert properties["image"]["default"] == DEFAULT_IMAGE
    placement = properties["placement"]["properties"]
    assert tuple(placement["instanceTypes"]["default"]) == DEFAULT_INSTANCE_TYPES
    assert placement["zones"]["properties"]["mode"]["default"] == model.placement.zones.mode
    strategy = properties["updateStrategy"]["properties"]
    assert strategy["minReadySeconds"]["default"] == model.update_strategy.min_ready_seconds
    assert strategy["drainTimeoutSeconds"]["default"] == model.update_strategy.drain_timeout_seconds
    assert (
        strategy["stuckPodTimeoutSeconds"]["default"]
        == model.update_strategy.stuck_pod_timeout_seconds
    )
    listeners = properties["listeners"]["properties"]
    assert listeners["mqtt"]["properties"]["port"]["default"] == model.listeners.mqtt.port
    assert listeners["tls"]["properties"]["port"]["default"] == model.listeners.tls.port


def test_cel_rules_are_present_where_the_schema_cannot_say_it() -> None:
    text = CRD.read_text()
    for fragment in (
        "maxUnavailable must be smaller than replicas",
        "zones.zone is required when zones.mode is Pinned",
        "tls.secretName is required when TLS is enabled",
        "stuckPodTimeoutSeconds must be longer than minReadySeconds",
    ):
        assert fragment in text


def test_the_chart_ships_an_identical_copy() -> None:
    assert (ROOT / "charts" / "xmq" / "crds" / "xmqcluster.yaml").read_text() == CRD.read_text()
