"""The broker's configuration model: one pydantic-settings model, YAML file plus ``XMQ_*``.

Every section refuses unknown keys, so a typo is an error that names the field. Values are
read once at start (and on reload); nothing here runs per packet. The larger sections live
beside it: listener_section (listeners, TLS), limits_section (mqtt, limits), cluster_section
(cluster, persistence).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from xmq.config.cluster_section import ClusterConfig, PersistenceConfig
from xmq.config.limits_section import LimitsConfig, MqttConfig
from xmq.config.listener_section import ListenerConfig
from xmq.config.section import Section
from xmq.contract.pod import HEALTH_PORT, REDIS_URL_ENV

MAX_WORKERS = 64


class AuthConfig(Section):
    """Where accounts come from."""

    allow_anonymous: bool = Field(
        default=True, description="Accept clients that give no user name."
    )
    accounts_file: Path | None = Field(
        default=None, description="YAML accounts file (verifiers, never clear text)."
    )
    postgres_dsn: str | None = Field(
        default=None,
        description="PostgreSQL DSN of the account store (accounts, groups, ACL rules); "
        "takes precedence over accounts_file.",
    )
    migrate_on_start: bool = Field(
        default=False, description="Apply the account schema migrations at start."
    )
    acl_no_match: Literal["allow", "deny"] = Field(
        default="deny", description="Decision when no ACL rule matches (PostgreSQL store)."
    )
    cache_ttl_s: float = Field(
        default=300.0, gt=0, description="Seconds an account and its rules stay cached."
    )
    foreign_session: Literal["refuse", "clean_start"] = Field(
        default="refuse",
        description="A CONNECT by another user (or anonymous) with the client id of a session "
        "someone else holds: refuse it with 0x87 Not authorized, the session and its client "
        "undisturbed (refuse), or discard that session and start clean (clean_start).",
    )


class SysConfig(Section):
    """``$SYS/broker/...`` statistics."""

    interval_s: float = Field(
        default=10.0, ge=0, description="Seconds between $SYS publications (0: off)."
    )


class MetricsConfig(Section):
    """The HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz``, ``/readyz``, ``/admin/...``."""

    enabled: bool = Field(default=True, description="Serve the HTTP endpoint.")
    host: str = Field(default="0.0.0.0", description="Address to bind.")
    port: int = Field(
        default=HEALTH_PORT, ge=0, le=65535, description="Port to bind (0: any free)."
    )
    max_loop_lag_s: float = Field(
        default=5.0, gt=0, description="Event-loop lag above which /healthz fails."
    )
    admin_token_file: Path | None = Field(
        default=None,
        description="File holding the bearer token the admin endpoints (POST /admin/drain) "
        "require (`Authorization: Bearer <token>`, at least 16 characters, re-read on every "
        "request; `xmq drain` sends it). Unset: admin endpoints answer loopback clients only "
        "(403 otherwise); /metrics and the probes stay open either way.",
    )


class ShutdownConfig(Section):
    """SIGTERM and drain."""

    grace_s: float = Field(
        default=10.0,
        ge=0,
        description="Seconds to flush and close connections after SIGTERM before aborting them "
        "(keep below Kubernetes' terminationGracePeriodSeconds).",
    )
    server_reference: str | None = Field(
        default=None,
        description="Server Reference sent with DISCONNECT 0x9C (use another server) when "
        "draining; without it drained MQTT 5 clients get 0x8B.",
    )


class LogConfig(Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", description="Log level."
    )
    json_format: bool = Field(default=False, description="One JSON object per line.")


class BrokerConfig(BaseSettings):
    """The whole broker configuration (YAML file plus ``XMQ_*`` environment variables)."""

    model_config = SettingsConfigDict(
        env_prefix="XMQ_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    node_id: str = Field(default="xmq-0", min_length=1, description="This node's identifier.")
    listeners: tuple[ListenerConfig, ...] = Field(
        default=(ListenerConfig(),), description="Listening sockets."
    )
    mqtt: MqttConfig = Field(default_factory=MqttConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    sys: SysConfig = Field(default_factory=SysConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    shutdown: ShutdownConfig = Field(default_factory=ShutdownConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    persistence: PersistenceConfig = Field(default_factory=PersistenceConfig)
    workers: int = Field(
        default=1,
        ge=0,
        le=MAX_WORKERS,
        description="Node processes sharing the listening ports (SO_REUSEPORT), each a full "
        "cluster member; 0: one per CPU. Above 1 `xmq serve` supervises them and needs the "
        "cluster (a Redis URL). Worker i is node `<pod>-<n+i>` (node_id `<pod>-<n>`), with "
        "link port cluster.link_port + i and HTTP port metrics.port + 1 + i (metrics.port is "
        "the supervisor's: probes answered for every worker).",
    )
    use_uvloop: bool = Field(default=True, description="Run on uvloop.")

    @field_validator("listeners")
    @classmethod
    def _distinct_listener_names(
        cls, value: tuple[ListenerConfig, ...]
    ) -> tuple[ListenerConfig, ...]:
        names = [listener.name for listener in value]
        if len(set(names)) != len(names):
            raise ValueError(f"listener names must be distinct, got {names}")
        return value

    @field_validator("workers")
    @classmethod
    def _workers_need_the_cluster(cls, value: int, info: ValidationInfo) -> int:
        cluster = info.data.get("cluster")
        if value == 1 or not isinstance(cluster, ClusterConfig):
            return value
        if cluster.redis_url or os.environ.get(REDIS_URL_ENV):
            return value
        raise ValueError(
            f"workers={value} needs the cluster, so that a publisher on one worker reaches a "
            f"subscriber on another: set cluster.redis_url (or {REDIS_URL_ENV}), or workers: 1"
        )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        yaml_file = _yaml_file.get()
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if yaml_file is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file))
        return tuple(sources)


class _YamlFileSlot:
    """Which YAML file the next ``BrokerConfig`` construction reads (set by ``load_config``)."""

    __slots__ = ("path",)

    def __init__(self) -> None:
        self.path: Path | None = None

    def get(self) -> Path | None:
        return self.path


_yaml_file = _YamlFileSlot()


def load_config(path: str | Path | None = None, **overrides: Any) -> BrokerConfig:
    """Build the configuration from a YAML file (optional), ``XMQ_*`` and keyword overrides.

    Raises ``pydantic.ValidationError`` whose messages name the offending field.
    """
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise FileNotFoundError(f"config file not found: {file}")
        _yaml_file.path = file
    try:
        return BrokerConfig(**overrides)
    finally:
        _yaml_file.path = None
