"""The values the core needs, as plain objects (the app layer builds them from config)."""

from __future__ import annotations

from dataclasses import dataclass, field

from xmq.core.session import QueueLimits
from xmq.protocol.connect_terms import ServerLimits


@dataclass(slots=True, frozen=True)
class CoreSettings:
    """Everything the broker core reads from configuration."""

    node_id: str = "xmq-0"
    limits: ServerLimits = field(default_factory=ServerLimits)
    queues: QueueLimits = field(
        default_factory=lambda: QueueLimits(10_000, 16 * 1024 * 1024, 512 * 1024 * 1024, 1024)
    )
    max_topic_length: int = 65535
    max_topic_levels: int = 128
    max_subscriptions_per_client: int = 0
    max_sessions: int = 0
    max_persistent_sessions: int = 0
    max_retained_messages: int = 0
    max_retained_bytes: int = 0
    max_write_buffer_bytes: int = 4 * 1024 * 1024
    sys_interval_s: float = 10.0
    response_information_prefix: str = "response/"
    foreign_session: str = "refuse"
    """A CONNECT of another identity with a session's client id: ``refuse`` or
    ``clean_start`` (``core.session_access``)."""
    version: str = "0.1.0"
