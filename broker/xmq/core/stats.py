"""Broker-wide counters: plain integer attributes, cheap to bump on the hot path."""

from __future__ import annotations

from bisect import bisect_left

#: Upper bounds (seconds) of the routing-latency histogram buckets.
ROUTE_BUCKETS = (
    0.000_01,
    0.000_025,
    0.000_05,
    0.000_1,
    0.000_25,
    0.000_5,
    0.001,
    0.002_5,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
)


class LatencyHistogram:
    """A fixed-bucket histogram, cheap enough to observe once per routed message."""

    __slots__ = ("bounds", "counts", "total", "count")

    def __init__(self, bounds: tuple[float, ...] = ROUTE_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last bucket is +Inf
        self.total = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total += seconds
        self.count += 1


class BrokerStats:
    """Counters read by $SYS and the metrics endpoint."""

    __slots__ = (
        "bytes_received",
        "bytes_sent",
        "clients_connected",
        "clients_maximum",
        "connects_refused",
        "connects_total",
        "deliveries_routed",
        "caps_hit",
        "disconnects_by_reason",
        "dropped_by_reason",
        "messages_dropped",
        "messages_expired",
        "messages_received",
        "messages_sent",
        "publish_denied",
        "quota_drops",
        "queued_bytes",
        "received_bytes_qos0",
        "received_bytes_qos1",
        "received_bytes_qos2",
        "received_qos0",
        "received_qos1",
        "received_qos2",
        "refused_by_reason",
        "route_seconds",
        "sent_bytes_qos0",
        "sent_bytes_qos1",
        "sent_bytes_qos2",
        "sent_qos0",
        "sent_qos1",
        "sent_qos2",
        "subscribe_refused_by_reason",
        "subscriptions_revoked",
    )

    def __init__(self) -> None:
        self.bytes_received = 0
        self.bytes_sent = 0
        self.clients_connected = 0
        self.clients_maximum = 0
        self.connects_total = 0
        self.connects_refused = 0
        self.deliveries_routed = 0
        """Deliveries planned by routing (read slicing and metrics: work done per read)."""
        self.messages_received = 0
        self.messages_sent = 0
        self.messages_dropped = 0
        self.messages_expired = 0
        self.publish_denied = 0
        self.quota_drops = 0
        """Deliveries dropped for a quota (a full session queue, the memory budget): a
        QoS 1/2 PUBLISH all of whose deliveries were is answered 0x97, not 0x10."""
        self.queued_bytes = 0
        self.refused_by_reason: dict[int, int] = {}
        """CONNACK refusals by reason code (0x86/0x87: authentication, 0x97: quota, ...)."""
        # PUBLISH packets and their payload bytes, received and sent, by QoS: a native field
        # each (``count_received``, ``count_sent``), read as lists (``received_by_qos``...).
        # An item of a ``list[int]`` is a boxed int: bumped past 256, each update allocated a
        # new one and freed the old (~150 instructions, four a point-to-point message).
        self.received_qos0 = 0
        self.received_qos1 = 0
        self.received_qos2 = 0
        self.received_bytes_qos0 = 0
        self.received_bytes_qos1 = 0
        self.received_bytes_qos2 = 0
        self.sent_qos0 = 0
        self.sent_qos1 = 0
        self.sent_qos2 = 0
        self.sent_bytes_qos0 = 0
        self.sent_bytes_qos1 = 0
        self.sent_bytes_qos2 = 0
        self.dropped_by_reason: dict[str, int] = {}
        """Messages not delivered, by reason (queue_full, budget, oversize, ...)."""
        self.subscribe_refused_by_reason: dict[int, int] = {}
        """SUBACK refusals by reason code (0x87 ACL, 0x8F filter, 0x97 quota, ...)."""
        self.caps_hit: dict[str, int] = {}
        """Requests refused at a cap, by cap (sessions, retained_messages, ...)."""
        self.route_seconds = LatencyHistogram()
        """Time from a PUBLISH read to its bytes queued for every subscriber's connection."""
        self.disconnects_by_reason: dict[int, int] = {}
        """Connections the server closed, by DISCONNECT reason (0x8D keep alive, 0x90 ...)."""
        self.subscriptions_revoked = 0
        """Subscriptions of resumed sessions removed because the rules no longer allow them."""

    def count_received(self, qos: int, payload_bytes: int) -> None:
        """One PUBLISH received at ``qos`` with a payload of ``payload_bytes``."""
        if qos == 1:
            self.received_qos1 += 1
            self.received_bytes_qos1 += payload_bytes
        elif qos == 0:
            self.received_qos0 += 1
            self.received_bytes_qos0 += payload_bytes
        else:
            self.received_qos2 += 1
            self.received_bytes_qos2 += payload_bytes

    def count_sent(self, qos: int, payload_bytes: int) -> None:
        """One PUBLISH sent at ``qos`` with a payload of ``payload_bytes``."""
        if qos == 1:
            self.sent_qos1 += 1
            self.sent_bytes_qos1 += payload_bytes
        elif qos == 0:
            self.sent_qos0 += 1
            self.sent_bytes_qos0 += payload_bytes
        else:
            self.sent_qos2 += 1
            self.sent_bytes_qos2 += payload_bytes

    @property
    def received_by_qos(self) -> list[int]:
        """PUBLISH packets received, by QoS (a new list: for reading)."""
        return [self.received_qos0, self.received_qos1, self.received_qos2]

    @property
    def sent_by_qos(self) -> list[int]:
        """PUBLISH packets sent, by QoS (a new list: for reading)."""
        return [self.sent_qos0, self.sent_qos1, self.sent_qos2]

    @property
    def received_bytes_by_qos(self) -> list[int]:
        """Payload bytes of the PUBLISH packets received, by QoS (a new list: for reading)."""
        return [self.received_bytes_qos0, self.received_bytes_qos1, self.received_bytes_qos2]

    @property
    def sent_bytes_by_qos(self) -> list[int]:
        """Payload bytes of the PUBLISH packets sent, by QoS (a new list: for reading)."""
        return [self.sent_bytes_qos0, self.sent_bytes_qos1, self.sent_bytes_qos2]

    def cap_hit(self, cap: str) -> None:
        """Count one request refused at a cap (rare: at a cap, never on the hot path)."""
        self.caps_hit[cap] = self.caps_hit.get(cap, 0) + 1

    def drop(self, reason: str) -> None:
        """Count one message dropped (a rare event: the dict costs nothing on the hot path)."""
        self.messages_dropped += 1
        self.dropped_by_reason[reason] = self.dropped_by_reason.get(reason, 0) + 1

    def drop_for_quota(self, reason: str) -> None:
        """Count one delivery dropped because a quota was exceeded."""
        self.quota_drops += 1
        self.drop(reason)
