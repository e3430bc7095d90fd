"""Per-client publish rate: a token bucket that slows the reader down instead of dropping.

Only listeners with ``publish_rate`` use this subclass, so the plain protocol's hot path is
untouched. PUBLISH packets are counted through the broker's ``messages_received`` counter
(bumped synchronously per inbound PUBLISH): every packet already read is processed, then
reading pauses until the bucket's debt is repaid. Nothing is dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from xmq.core.auth_ports import Authenticator, Authorizer
from xmq.core.broker import Broker
from xmq.net.client_protocol import FlushScheduler, MqttClientProtocol
from xmq.net.rate_limits import TokenBucket


class ThrottledClientProtocol(MqttClientProtocol):
    """A client connection whose PUBLISH rate is limited by pausing its socket."""

    __slots__ = ("_bucket", "_held_by_core", "_on_throttle", "_resume_handle")

    def __init__(
        self,
        broker: Broker,
        authenticator: Authenticator,
        authorizer: Authorizer,
        scheduler: FlushScheduler,
        max_packet_size: int,
        rate: float,
        burst: int,
        on_close: Callable[[MqttClientProtocol], None] | None = None,
        on_throttle: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(broker, authenticator, authorizer, scheduler, max_packet_size, on_close)
        self._bucket = TokenBucket(rate, burst, broker.loop.time())
        self._resume_handle: asyncio.TimerHandle | None = None
        self._on_throttle = on_throttle
        self._held_by_core = False

    def data_received(self, data: bytes) -> None:
        stats = self._stats
        before = stats.messages_received
        super().data_received(data)
        self._charge(stats.messages_received - before)

    def _resume_backlog(self) -> None:
        # the rest of a sliced read (client_protocol): its PUBLISH packets are charged too
        stats = self._stats
        before = stats.messages_received
        super()._resume_backlog()
        self._charge(stats.messages_received - before)

    def _charge(self, published: int) -> None:
        if published and self._resume_handle is None:
            loop = self.conn.broker.loop
            delay = self._bucket.charge(loop.time(), published)
            if delay > 0:
                if self._on_throttle is not None:
                    self._on_throttle()
                super().pause_reading()
                self._resume_handle = loop.call_later(delay, self._resume)
        elif published:
            self._bucket.charge(self.conn.broker.loop.time(), published)

    def _resume(self) -> None:
        self._resume_handle = None
        if not self._held_by_core:
            super().resume_reading()

    # The core pauses too (authentication, persistence window): reading resumes only when
    # neither the core nor the throttle holds it.

    def pause_reading(self) -> None:
        self._held_by_core = True
        super().pause_reading()

    def resume_reading(self) -> None:
        self._held_by_core = False
        if self._resume_handle is None:
            super().resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._resume_handle is not None:
            self._resume_handle.cancel()
            self._resume_handle = None
        super().connection_lost(exc)
