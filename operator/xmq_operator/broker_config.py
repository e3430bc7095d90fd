"""The broker config the operator writes into the ConfigMap, its validation and its hash."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import yaml
from pydantic import ValidationError

from xmq.config import BrokerConfig
from xmq.contract import InvalidNameError, validate_cluster_name
from xmq.contract import pod as pod_contract
from xmq_operator.naming import ClusterNames
from xmq_operator.spec import ClusterSpec

HOT_RELOADABLE_SECTIONS = frozenset({"log"})
"""Top-level config sections the broker applies without a restart: not part of the roll hash."""


class InvalidBrokerConfigError(ValueError):
    """``spec.config`` (with what the operator adds) is not a valid broker config."""


def redis_cluster_name(spec: ClusterSpec, names: ClusterNames) -> str:
    """The cluster name used in Redis keys: ``spec.config.cluster.name`` or namespace.name."""
    section = spec.config.get("cluster")
    configured = section.get("name") if isinstance(section, dict) else None
    name = configured if isinstance(configured, str) and configured else None
    try:
        return validate_cluster_name(name or names.default_redis_cluster_name)
    except InvalidNameError as exc:
        raise InvalidBrokerConfigError(str(exc)) from exc


def _listeners(spec: ClusterSpec) -> list[dict[str, Any]]:
    listeners: list[dict[str, Any]] = [
        {"name": "mqtt", "protocol": "tcp", "port": spec.listeners.mqtt.port}
    ]
    if spec.listeners.tls.enabled:
        listeners.append(
            {
                "name": "mqtts",
                "protocol": "tls",
                "port": spec.listeners.tls.port,
                "tls": {
                    "cert_file": f"{pod_contract.TLS_DIR}/tls.crt",
                    "key_file": f"{pod_contract.TLS_DIR}/tls.key",
                },
            }
        )
    return listeners


def build_broker_config(spec: ClusterSpec, cluster_name: str) -> dict[str, Any]:
    """``spec.config`` completed with what the XmqCluster declares.

    The user's own ``listeners`` win. The operator sets ``cluster.name`` (unless given),
    binds the node link on every interface at the contract's port, and leaves the Redis URL,
    PostgreSQL DSN and pod identity to environment variables (see :mod:`xmq.contract.pod`).
    """
    config = copy.deepcopy(spec.config)
    config.setdefault("listeners", _listeners(spec))
    section = config.get("cluster")
    cluster: dict[str, Any] = dict(section) if isinstance(section, dict) else {}
    cluster.setdefault("name", cluster_name)
    cluster.setdefault("link_host", "0.0.0.0")
    cluster["link_port"] = pod_contract.CLUSTER_LINK_PORT
    if spec.link_tls is not None:
        cluster.setdefault(
            "link_tls",
            {
                "cert_file": f"{pod_contract.LINK_TLS_DIR}/tls.crt",
                "key_file": f"{pod_contract.LINK_TLS_DIR}/tls.key",
                "ca_file": f"{pod_contract.LINK_TLS_DIR}/ca.crt",
            },
        )
    config["cluster"] = cluster
    if spec.admin_token is not None:
        metrics = config.get("metrics")
        config["metrics"] = {
            **(metrics if isinstance(metrics, dict) else {}),
            "admin_token_file": pod_contract.ADMIN_TOKEN_FILE,
        }
    return config


def validate_broker_config(config: dict[str, Any]) -> None:
    """Raise :class:`InvalidBrokerConfigError` naming the bad fields, if any."""
    if "workers" in config:
        # The pod's XMQ_WORKERS (from spec.workers) would win over the file anyway.
        raise InvalidBrokerConfigError(
            "spec.config is invalid: workers: set spec.workers instead (processes per pod)"
        )
    try:
        BrokerConfig.model_validate(config)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '(root)'}: {error['msg']}"
            for error in exc.errors()
        )
        raise InvalidBrokerConfigError(f"spec.config is invalid: {problems}") from exc


def config_yaml(config: dict[str, Any]) -> str:
    """The config file's text (stable key order)."""
    return yaml.safe_dump(config, sort_keys=True, default_flow_style=False)


def stable_hash(value: object, length: int = 16) -> str:
    """Hex SHA-256 of the canonical JSON of ``value`` (sorted keys), shortened."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]


def restart_hash(config: dict[str, Any]) -> str:
    """Hash of the restart-relevant part of ``config`` (hot-reloadable sections left out)."""
    relevant = {key: value for key, value in config.items() if key not in HOT_RELOADABLE_SECTIONS}
    return stable_hash(relevant)
