"""The broker's configuration model: one pydantic-settings model, YAML file plus ``XMQ_*``.

Every section refuses unknown keys, so a typo is an error that names the field. Values are
read once at start (and on reload); nothing here runs per packet.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from xmq.config.cluster_section import ClusterConfig, PersistenceConfig
from xmq.config.section import Section
from xmq.contract.pod import HEALTH_PORT, REDIS_URL_ENV

MAX_PACKET_SIZE_LIMIT = 268_435_460
MAX_WORKERS = 64


DEFAULT_PORTS = {"tcp": 1884, "tls": 8884, "ws": 8083, "wss": 8443}


class TlsConfig(Section):
    """Server certificate and optional client certificates (mTLS) of a TLS/WSS listener."""

    cert_file: Path = Field(description="PEM certificate chain of the server.")
    key_file: Path = Field(description="PEM private key of the server.")
    ca_file: Path | None = Field(
        default=None, description="PEM CA bundle that client certificates must chain to."
    )
    client_certs: Literal["none", "optional", "required"] = Field(
        default="none",
        description="Ask clients for a certificate: not at all, optionally, or require one "
        "(needs ca_file).",
    )
    cn_as_username: bool = Field(
        default=False,
        description="Use the client certificate's Common Name as the user name.",
    )
    min_version: Literal["TLSv1.2", "TLSv1.3"] = Field(
        default="TLSv1.2", description="Oldest TLS version accepted."
    )
    reload_interval_s: float = Field(
        default=10.0,
        ge=0,
        description="Seconds between checks of the certificate files for changes (0: only on "
        "SIGHUP). Open connections keep their session.",
    )

    @model_validator(mode="after")
    def _client_ca(self) -> TlsConfig:
        if self.client_certs != "none" and self.ca_file is None:
            raise ValueError(f"client_certs={self.client_certs!r} needs ca_file")
        return self


class ListenerConfig(Section):
    """One listening socket."""

    name: str = Field(default="mqtt", description="Name used in logs and metrics.")
    protocol: Literal["tcp", "tls", "ws", "wss"] = Field(
        default="tcp", description="Transport: plain TCP, TLS, WebSocket or secure WebSocket."
    )
    host: str = Field(default="0.0.0.0", description="Address to bind.")
    port: int = Field(
        default=1884,
        ge=0,
        le=65535,
        description="Port to bind (0: any free). Default by protocol: tcp 1884, tls 8884, "
        "ws 8083, wss 8443.",
    )
    tls: TlsConfig | None = Field(
        default=None, description="Certificates (required for tls and wss)."
    )
    ws_path: str = Field(
        default="/mqtt", description="HTTP path of the WebSocket endpoint (ws and wss)."
    )
    proxy_protocol: Literal["off", "optional", "required"] = Field(
        default="off",
        description="PROXY protocol v1/v2 header before the client's bytes (as sent by a "
        "load balancer): off, accepted if present, or required (connections without it are "
        "closed).",
    )
    max_connections: int = Field(
        default=0, ge=0, description="Connections accepted at once on this listener (0: no limit)."
    )
    max_connection_rate: float = Field(
        default=0,
        ge=0,
        description="New connections per second on this listener; above it CONNECT is refused "
        "with 0x9F (0: no limit).",
    )
    connection_rate_burst: int = Field(
        default=0,
        ge=0,
        description="Connections allowed in a burst above the rate (0: one second's worth).",
    )
    publish_rate: float = Field(
        default=0,
        ge=0,
        description="PUBLISH packets per second per client; a faster client is slowed down "
        "(reading paused), nothing is dropped (0: no limit).",
    )
    publish_burst: int = Field(
        default=0, ge=0, description="PUBLISH burst above the rate (0: one second's worth)."
    )
    connect_timeout_s: float = Field(
        default=10.0,
        ge=0,
        description="Seconds a new connection may take for its PROXY header, its TLS "
        "handshake, its WebSocket upgrade and its CONNECT, each, before it is dropped (0: no "
        "limit; the PROXY header then gets 5).",
    )

    @model_validator(mode="before")
    @classmethod
    def _port_by_protocol(cls, data: Any) -> Any:
        if isinstance(data, dict) and "port" not in data:
            protocol = data.get("protocol", "tcp")
            if protocol in DEFAULT_PORTS:
                return {**data, "port": DEFAULT_PORTS[protocol]}
        return data

    @model_validator(mode="after")
    def _tls_needed(self) -> ListenerConfig:
        if self.protocol in ("tls", "wss") and self.tls is None:
            raise ValueError(f"protocol {self.protocol!r} needs a tls section")
        if self.protocol in ("tcp", "ws") and self.tls is not None:
            raise ValueError(f"protocol {self.protocol!r} takes no tls section (use tls/wss)")
        if not self.ws_path.startswith("/"):
            raise ValueError(f"ws_path must start with '/', got {self.ws_path!r}")
        return self


class MqttConfig(Section):
    """Protocol limits the broker announces in CONNACK and enforces."""

    max_packet_size: int = Field(
        default=1_048_576,
        ge=64,
        le=MAX_PACKET_SIZE_LIMIT,
        description="Largest packet accepted from a client, in bytes (0x95 above it).",
    )
    receive_maximum: int = Field(
        default=1024,
        ge=1,
        le=65535,
        description="Unacknowledged inbound QoS 1/2 PUBLISH packets allowed per client (0x93).",
    )
    max_keepalive_s: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Largest keep alive granted; a client asking for more (or 0) gets this "
        "value as Server Keep Alive (0: accept the client's value).",
    )
    topic_alias_maximum: int = Field(
        default=64, ge=0, le=65535, description="Topic aliases a client may use towards us."
    )
    maximum_qos: int = Field(default=2, ge=0, le=2, description="Highest QoS supported.")
    retain_available: bool = Field(default=True, description="Retained messages are supported.")
    max_session_expiry_s: int = Field(
        default=0xFFFF_FFFF,
        ge=0,
        le=0xFFFF_FFFF,
        description="Largest session expiry interval granted (4294967295: never expires).",
    )
    max_topic_length: int = Field(
        default=65535,
        ge=1,
        le=65535,
        description="Longest topic name or filter, in bytes (0x90 for a name: DISCONNECT; "
        "0x8F for a filter: SUBACK).",
    )
    max_topic_levels: int = Field(
        default=128,
        ge=0,
        description="Most levels in a topic name or filter, as EMQX (0x90 / 0x8F above it; "
        "0: no limit).",
    )
    max_subscriptions_per_client: int = Field(
        default=1000,
        ge=0,
        description="Subscriptions (filters) a client may hold; more are refused in SUBACK "
        "with 0x97 (0: no limit).",
    )
    max_client_id_length: int = Field(
        default=65535, ge=23, le=65535, description="Longest client identifier accepted."
    )


class LimitsConfig(Section):
    """Memory bounds: nothing grows without limit."""

    max_queued_messages: int = Field(
        default=10_000,
        ge=1,
        description="Messages queued per session (beyond the in-flight window).",
    )
    max_queued_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        description="Bytes queued per session (payload, topic and object overhead).",
    )
    memory_budget_bytes: int = Field(
        default=512 * 1024 * 1024,
        ge=1024 * 1024,
        description="Broker-wide budget of queued message memory (object overhead included, "
        "see docs/security.md); above it new QoS 1/2 messages to offline or slow sessions "
        "are not queued.",
    )
    max_sessions: int = Field(
        default=200_000,
        ge=0,
        description="Sessions this node holds (connected or not); a CONNECT that would create "
        "one more is refused with 0x97 (0: no limit).",
    )
    max_persistent_sessions: int = Field(
        default=100_000,
        ge=0,
        description="Sessions with a session expiry this node holds; a CONNECT that would "
        "create one more is refused with 0x97 (0: no limit).",
    )
    max_retained_messages: int = Field(
        default=100_000,
        ge=0,
        description="Retained messages; a retained PUBLISH on a new topic above it is refused "
        "(PUBACK/PUBREC 0x97; MQTT 3.1.1: connection closed; QoS 0: dropped and counted) "
        "(0: no limit).",
    )
    max_retained_bytes: int = Field(
        default=256 * 1024 * 1024,
        ge=0,
        description="Memory of the retained messages (topic, payload and object overhead); a "
        "retained PUBLISH that would pass it is refused like one over "
        "max_retained_messages (0: no limit).",
    )
    max_inflight_messages: int = Field(
        default=1024,
        ge=1,
        le=65535,
        description="Outbound QoS 1/2 messages in flight per client (capped by the client's "
        "Receive Maximum).",
    )
    max_write_buffer_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=16 * 1024,
        description="Bytes buffered towards one client before QoS 0 is dropped for it.",
    )
    max_connections: int = Field(
        default=0,
        ge=0,
        description="Connections open at once over all listeners; above it CONNECT is refused "
        "with 0x97 (0: no limit).",
    )


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
