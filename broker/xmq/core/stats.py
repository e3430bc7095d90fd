"""Broker-wide counters: plain integer attributes, cheap to bump on the hot path."""

from __future__ import annotations


class BrokerStats:
    """Counters read by $SYS and the metrics endpoint."""

    __slots__ = (
        "bytes_received",
        "bytes_sent",
        "clients_connected",
        "clients_maximum",
        "connects_refused",
        "connects_total",
        "disconnects_by_reason",
        "dropped_by_reason",
        "messages_dropped",
        "messages_expired",
        "messages_received",
        "messages_sent",
        "publish_denied",
        "queued_bytes",
        "received_by_qos",
        "refused_by_reason",
        "sent_by_qos",
    )

    def __init__(self) -> None:
        self.bytes_received = 0
        self.bytes_sent = 0
        self.clients_connected = 0
        self.clients_maximum = 0
        self.connects_total = 0
        self.connects_refused = 0
        self.messages_received = 0
        self.messages_sent = 0
        self.messages_dropped = 0
        self.messages_expired = 0
        self.publish_denied = 0
        self.queued_bytes = 0
        self.refused_by_reason: dict[int, int] = {}
        """CONNACK refusals by reason code (0x86/0x87: authentication, 0x97: quota, ...)."""
        self.received_by_qos = [0, 0, 0]
        """PUBLISH packets received, by QoS."""
        self.sent_by_qos = [0, 0, 0]
        """PUBLISH packets sent, by QoS."""
        self.dropped_by_reason: dict[str, int] = {}
        """Messages not delivered, by reason (queue_full, budget, oversize, ...)."""
        self.disconnects_by_reason: dict[int, int] = {}
        """Connections the server closed, by DISCONNECT reason (0x8D keep alive, 0x90 ...)."""

    def drop(self, reason: str) -> None:
        """Count one message dropped (a rare event: the dict costs nothing on the hot path)."""
        self.messages_dropped += 1
        self.dropped_by_reason[reason] = self.dropped_by_reason.get(reason, 0) + 1
