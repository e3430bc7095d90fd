"""``$SYS/broker/...`` statistics, published periodically as retained messages."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from xmq.core.message import Message

if TYPE_CHECKING:
    from xmq.core.broker import Broker


class SysPublisher:
    """Publishes the broker's counters under ``$SYS/broker/`` every ``interval_s`` seconds."""

    __slots__ = ("_handle", "_started", "broker", "interval_s")

    def __init__(self, broker: Broker, interval_s: float) -> None:
        self.broker = broker
        self.interval_s = interval_s
        self._started = time.monotonic()
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        if self.interval_s > 0:
            self.publish_once()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def values(self) -> dict[str, str]:
        broker = self.broker
        stats = broker.stats
        return {
            "version": f"xmq {broker.settings.version}",
            "uptime": f"{int(time.monotonic() - self._started)} seconds",
            "clients/connected": str(stats.clients_connected),
            "clients/maximum": str(stats.clients_maximum),
            "clients/total": str(len(broker.sessions)),
            "messages/received": str(stats.messages_received),
            "messages/sent": str(stats.messages_sent),
            "messages/dropped": str(stats.messages_dropped),
            "messages/expired": str(stats.messages_expired),
            "bytes/received": str(stats.bytes_received),
            "bytes/sent": str(stats.bytes_sent),
            "retained messages/count": str(len(broker.retained)),
            "subscriptions/count": str(broker.subscription_count()),
            "queued/bytes": str(stats.queued_bytes),
        }

    def publish_once(self) -> None:
        broker = self.broker
        now = broker.now()
        for name, value in self.values().items():
            message = Message(f"$SYS/broker/{name}", value.encode(), 0, True, None, None, now)
            broker.publish(message)
        self._handle = broker.loop.call_later(self.interval_s, self.publish_once)
