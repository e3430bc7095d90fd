"""The broker's configuration model (pydantic-settings)."""

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
    "LimitsConfig",
    "ListenerConfig",
    "LogConfig",
    "MetricsConfig",
    "MqttConfig",
    "ShutdownConfig",
    "SysConfig",
    "TlsConfig",
    "load_config",
]
