"""The XmqCluster spec as a typed model, with the same defaults as the CRD schema.

The API server applies the CRD's defaults and refuses what its schema and CEL rules refuse;
this model is the operator's view of an accepted spec (and the unit tests' way to build one).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

API_GROUP = "xmq.io"
API_VERSION = "v1alpha1"
KIND = "XmqCluster"
PLURAL = "xmqclusters"

DEFAULT_IMAGE = "xmq:0.1.0"
DEFAULT_INSTANCE_TYPES = (
    "c5n.xlarge",
    "c5n.2xlarge",
    "c5n.4xlarge",
    "c5n.9xlarge",
    "c5n.18xlarge",
    "c5n.metal",
)


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class SecretKeyRef(_Spec):
    name: str = Field(min_length=1)
    key: str = Field(min_length=1)


class RedisSpec(_Spec):
    secret_ref: SecretKeyRef = Field(alias="secretRef")


class PostgresSpec(_Spec):
    secret_ref: SecretKeyRef = Field(alias="secretRef")


class ZonesSpec(_Spec):
    mode: Literal["Spread", "Pinned", "Any"] = "Spread"
    zone: str | None = None
    when_unsatisfiable: Literal["ScheduleAnyway", "DoNotSchedule"] = Field(
        default="ScheduleAnyway", alias="whenUnsatisfiable"
    )


class PlacementSpec(_Spec):
    instance_types: tuple[str, ...] = Field(default=DEFAULT_INSTANCE_TYPES, alias="instanceTypes")
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    one_per_node: bool = Field(default=True, alias="onePerNode")
    zones: ZonesSpec = Field(default_factory=ZonesSpec)
    tolerations: tuple[dict[str, Any], ...] = ()
    priority_class_name: str | None = Field(default=None, alias="priorityClassName")


class MqttListenerSpec(_Spec):
    port: int = Field(default=1884, ge=1, le=65535)


class TlsListenerSpec(_Spec):
    enabled: bool = False
    port: int = Field(default=8883, ge=1, le=65535)
    secret_name: str | None = Field(default=None, alias="secretName")


class ServiceSpec(_Spec):
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    annotations: dict[str, str] = Field(default_factory=dict)


class ListenersSpec(_Spec):
    mqtt: MqttListenerSpec = Field(default_factory=MqttListenerSpec)
    tls: TlsListenerSpec = Field(default_factory=TlsListenerSpec)
    service: ServiceSpec = Field(default_factory=ServiceSpec)


class LinkTlsSpec(_Spec):
    secret_name: str = Field(min_length=1, alias="secretName")


class AdminTokenSpec(_Spec):
    secret_name: str = Field(min_length=1, alias="secretName")
    key: str = Field(default="token", min_length=1)


class UpdateStrategySpec(_Spec):
    min_ready_seconds: int = Field(default=10, ge=0, alias="minReadySeconds")
    drain_timeout_seconds: int = Field(default=60, ge=1, alias="drainTimeoutSeconds")
    stuck_pod_timeout_seconds: int = Field(default=600, ge=1, alias="stuckPodTimeoutSeconds")


class PdbSpec(_Spec):
    enabled: bool = True
    max_unavailable: int = Field(default=1, ge=0, alias="maxUnavailable")


QUANTITY = re.compile(
    r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$"
)
"""A Kubernetes resource quantity (``500m``, ``2``, ``1.5Gi``, ``1e3``)."""


def check_quantities(values: Any) -> Any:
    """Refuse what the API server would refuse late (a StatefulSet apply failing with 500)."""
    for name, value in values.items() if isinstance(values, dict) else ():
        text = str(value).strip()
        if isinstance(value, bool) or not QUANTITY.match(text) or text.startswith("-"):
            raise ValueError(f"{name}: {value!r} is not a Kubernetes resource quantity")
    return values


class ResourcesSpec(_Spec):
    requests: dict[str, int | str] = Field(default_factory=dict)
    limits: dict[str, int | str] = Field(default_factory=dict)

    _quantities = field_validator("requests", "limits", mode="before")(check_quantities)


class ClusterSpec(_Spec):
    """``spec`` of an XmqCluster."""

    redis: RedisSpec
    replicas: int = Field(default=4, ge=0)
    image: str = Field(default=DEFAULT_IMAGE, min_length=1)
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", alias="imagePullPolicy"
    )
    image_pull_secrets: tuple[str, ...] = Field(default=(), alias="imagePullSecrets")
    workers: int = Field(default=0, ge=0)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    placement: PlacementSpec = Field(default_factory=PlacementSpec)
    postgres: PostgresSpec | None = None
    listeners: ListenersSpec = Field(default_factory=ListenersSpec)
    link_tls: LinkTlsSpec | None = Field(default=None, alias="linkTls")
    admin_token: AdminTokenSpec | None = Field(default=None, alias="adminToken")
    config: dict[str, Any] = Field(default_factory=dict)
    update_strategy: UpdateStrategySpec = Field(
        default_factory=UpdateStrategySpec, alias="updateStrategy"
    )
    pod_disruption_budget: PdbSpec = Field(default_factory=PdbSpec, alias="podDisruptionBudget")
