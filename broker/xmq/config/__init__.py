"""The broker's configuration model (pydantic-settings)."""

from xmq.config.cluster_section import ClusterConfig, LinkTlsConfig, PersistenceConfig
from xmq.config.model import (
    AuthConfig,
    BrokerConfig,
    LimitsConfig,
    ListenerConfig,
    LogConfig,
    MetricsConfig,
    MqttConfig,
    ShutdownConfig,
    SysConfig,
    TlsConfig,
    load_config,
)

__all__ = [
    "AuthConfig",
    "BrokerConfig",
    "ClusterConfig",
    "LimitsConfig",
    "LinkTlsConfig",
    "ListenerConfig",
    "LogConfig",
    "MetricsConfig",
    "MqttConfig",
    "PersistenceConfig",
    "ShutdownConfig",
    "SysConfig",
    "TlsConfig",
    "load_config",
]
