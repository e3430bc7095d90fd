"""The broker's configuration model (pydantic-settings)."""

from xmq.config.cluster_section import ClusterConfig, LinkTlsConfig, PersistenceConfig
from xmq.config.limits_section import LimitsConfig, MqttConfig
from xmq.config.listener_section import ListenerConfig, TlsConfig
from xmq.config.model import (
    AuthConfig,
    BrokerConfig,
    LogConfig,
    MetricsConfig,
    ShutdownConfig,
    SysConfig,
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
