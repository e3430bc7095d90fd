"""The ``mqtt`` and ``limits`` sections: protocol limits announced in CONNACK, memory bounds."""

from __future__ import annotations

from pydantic import Field

from xmq.config.section import Section

MAX_PACKET_SIZE_LIMIT = 268_435_460


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
