"""Admission of new connections: connection limits and rates per listener and broker-wide.

A connection over a limit is not dropped silently: it is accepted, its CONNECT is read and
answered with CONNACK 0x97 (quota exceeded) or 0x9F (connection rate exceeded), then closed,
and the refusal is counted by reason in the broker's statistics.
"""

from __future__ import annotations

import asyncio
import logging

from xmq.codec.errors import ProtocolError
from xmq.codec.packets import Connect
from xmq.codec.reason_codes import ReasonCode
from xmq.net.client_protocol import MqttClientProtocol
from xmq.net.rate_limits import TokenBucket

log = logging.getLogger("xmq.net")

REFUSED_CONNECT_TIMEOUT_S = 10.0


class ListenerGate:
    """Counts one listener's open connections and applies its limits."""

    __slots__ = ("_rate", "connect_timeouts", "max_connections", "name", "open", "throttled")

    def __init__(
        self, name: str, max_connections: int, rate: float, burst: int, now: float
    ) -> None:
        self.name = name
        self.max_connections = max_connections
        self.open = 0
        self.throttled = 0
        self.connect_timeouts = 0
        self._rate = TokenBucket(rate, burst, now) if rate > 0 else None

    def refusal(self, now: float, total_open: int, total_max: int) -> tuple[int, str] | None:
        """Why a new connection must be refused now, or ``None`` to admit it."""
        if self.max_connections and self.open >= self.max_connections:
            return ReasonCode.QUOTA_EXCEEDED, f"listener {self.name}: connection limit"
        if total_max and total_open >= total_max:
            return ReasonCode.QUOTA_EXCEEDED, "broker connection limit"
        if self._rate is not None and not self._rate.try_take(now):
            return ReasonCode.CONNECTION_RATE_EXCEEDED, f"listener {self.name}: connection rate"
        return None

    def count_throttled(self) -> None:
        self.throttled += 1


class RefusedClientProtocol(MqttClientProtocol):
    """A connection admitted only to be refused: reads CONNECT, answers the reason, closes."""

    __slots__ = ("_deadline", "_refusal")

    def set_refusal(self, reason_code: int, reason: str) -> None:
        self._refusal = (reason_code, reason)
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._deadline = self.conn.broker.loop.call_later(REFUSED_CONNECT_TIMEOUT_S, self.abort)

    def data_received(self, data: bytes) -> None:
        try:
            packets = self.reader.feed(data, 1)  # its CONNECT: nothing after it is looked at
        except ProtocolError:
            self.abort()
            return
        if not packets:
            return
        first = packets[0]
        if not isinstance(first, Connect):
            self.abort()
            return
        code, reason = self._refusal
        self.conn.refuse(code, reason, first.protocol_version)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        super().connection_lost(exc)
