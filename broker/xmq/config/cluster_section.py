"""The ``cluster`` and ``persistence`` sections: Redis membership, node links, durability."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from xmq.config.section import Section


class LinkTlsConfig(Section):
    """Mutual TLS on the node links: every node presents a certificate signed by the CA."""

    cert_file: Path = Field(description="PEM certificate chain this node presents to its peers.")
    key_file: Path = Field(description="PEM private key of cert_file.")
    ca_file: Path = Field(
        description="PEM CA bundle the peers' certificates must chain to (both directions). "
        "Host names are not checked: nodes dial pod IPs, so the chain is the identity."
    )


class ClusterConfig(Section):
    """Cluster membership in Redis and the node-to-node links (off without ``redis_url``)."""

    redis_url: str | None = Field(
        default=None,
        description="Redis URL of the cluster (env XMQ_CLUSTER__REDIS_URL or XMQ_REDIS_URL); "
        "unset: a single in-memory node. redis://[[user]:password@]host:port[/db], or through "
        "Redis Sentinel redis+sentinel://[[user]:password@]host:port[,host:port...]/<master "
        "name>[/db] (the credentials and db are the master's).",
    )
    redis_sentinels: list[str] = Field(
        default_factory=list,
        description="Redis Sentinel addresses (host:port, port default 26379) asked for the "
        "master's address: the node follows a failover without a restart. With redis_url, "
        "that URL gives only the credentials and db. Needs redis_master_name.",
    )
    redis_master_name: str = Field(
        default="",
        description="The master's name in Redis Sentinel (with redis_sentinels).",
    )
    name: str = Field(
        default="xmq",
        pattern=r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?$",
        description="Cluster name inside every Redis key (xmq:v1:{<name>}:...).",
    )
    lease_ttl_s: float = Field(
        default=10.0, ge=0.5, le=300, description="Lease time to live; renewed every ttl/5."
    )
    connect_wait_s: float = Field(
        default=5.0,
        ge=0.0,
        le=300,
        description="How long a CONNECT waits for the session's owner when that owner cannot "
        "be reached (its lease not expired yet); then CONNACK 0x88 Server unavailable, which "
        "clients retry. Keep it under the clients' connect timeout (commonly 10 s).",
    )

    @model_validator(mode="after")
    def _sentinels_need_a_master(self) -> ClusterConfig:
        if bool(self.redis_sentinels) != bool(self.redis_master_name):
            raise ValueError("redis_sentinels and redis_master_name go together")
        return self

    link_host: str = Field(default="127.0.0.1", description="Bind address of the node link.")
    link_port: int = Field(
        default=7884,
        ge=0,
        le=65535,
        description="Port of the node link (0: any free). Worker i of `workers` uses "
        "link_port + i.",
    )
    advertise_host: str | None = Field(
        default=None,
        description="Host other nodes dial (default: XMQ_POD_IP, else link_host).",
    )
    link_tls: LinkTlsConfig | None = Field(
        default=None,
        description="Mutual TLS on the node links (unset: plain TCP). Every node of the "
        "cluster must use it with the same CA.",
    )


class PersistenceConfig(Section):
    """Durable persistent sessions (used when the cluster has a Redis)."""

    max_queued_writes: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="0: a QoS 1/2 message to a persistent session is recorded in Redis before "
        "it is delivered and before its publisher gets the PUBACK / PUBREC, also when the "
        "session is on another node (group-committed per loop tick); N: at most N deliveries "
        "ahead of their records, then the publisher's socket is paused (acknowledgements do "
        "not wait).",
    )
    wait_replicas: int = Field(
        default=0,
        ge=0,
        le=16,
        description="N > 0: every pipeline of durable writes ends with WAIT N, and what waits "
        "for those writes (deliveries, held PUBACK / PUBREC) waits until N replicas have them, "
        "so an acknowledged message survives the loss of the Redis master (with Sentinel). "
        "While fewer than N replicas answer, acknowledgements wait.",
    )
    wait_timeout_ms: int = Field(
        default=1000,
        ge=1,
        le=60_000,
        description="Timeout of each WAIT (sent again while fewer than wait_replicas replicas "
        "have the writes).",
    )
    write_retry_s: float = Field(
        default=30.0,
        ge=0.1,
        le=3600,
        description="How long a durable write is retried through transient Redis failures "
        "(lost connection, LOADING, BUSY, TRYAGAIN, MASTERDOWN, READONLY) before it is given "
        "up: its publisher then gets an error (MQTT 5: 0x80; 3.1.1: the connection is closed "
        "without ack), never a success.",
    )
