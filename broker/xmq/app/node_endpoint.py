"""Wiring of a node's HTTP endpoint: metrics sources, readiness checks, admin actions.

The observability adapter may not import the network adapter (or cluster, storage, auth),
so this composition-root module connects them: listener gauges become ``LabelledSource``s,
"listening" and "not draining" become readiness checks, and ``POST /admin/drain`` starts a
drain. Other adapters add their readiness checks with ``NodeEndpoint.readiness.add``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from xmq.config import MetricsConfig
from xmq.core.broker import Broker
from xmq.net.listeners import ListenerSet
from xmq.observability.broker_metrics import BrokerCollector, LabelledSource, build_registry
from xmq.observability.http_endpoint import ObservabilityEndpoint
from xmq.observability.readiness import LoopLagMonitor, ReadinessCheck, ReadinessChecks

log = logging.getLogger("xmq.app")

DrainAction = Callable[[str | None], Awaitable[int]]
"""Starts a drain with an optional Server Reference; returns the clients disconnected."""


class CheckableStore(Protocol):
    async def check_ready(self) -> bool: ...


def database_check(store: CheckableStore, name: str) -> ReadinessCheck:
    """Ready while one trivial query succeeds (PostgreSQL account store)."""

    async def check() -> str | None:
        return None if await store.check_ready() else f"{name} unreachable"

    return check


def cluster_member_check(
    is_online: Callable[[], bool], ping: Callable[[], Awaitable[Any]]
) -> ReadinessCheck:
    """Ready while this node holds its lease (online) and Redis answers a PING."""

    async def check() -> str | None:
        if not is_online():
            return "cluster member offline (lease not held)"
        try:
            await ping()
        except Exception as error:  # any Redis failure means "not ready"
            return f"redis: {type(error).__name__}: {error}"
        return None

    return check


class NodeEndpoint:
    """Metrics, probes and admin of one node (started after the listeners)."""

    def __init__(
        self,
        config: MetricsConfig,
        broker: Broker,
        listeners: ListenerSet,
        is_draining: Callable[[], bool],
        drain: DrainAction,
    ) -> None:
        self.config = config
        self.loop_lag = LoopLagMonitor()
        self.readiness = ReadinessChecks()
        sources = [
            LabelledSource(
                "xmq_listener_connections",
                "Open network connections per listener.",
                "listener",
                listeners.connections_by_listener,
            ),
            LabelledSource(
                "xmq_publish_throttled",
                "Times a client was slowed down by its listener's publish rate.",
                "listener",
                listeners.throttled_by_listener,
                kind="counter",
            ),
            LabelledSource(
                "xmq_connect_timeouts",
                "Connections dropped for not sending CONNECT in time, per listener.",
                "listener",
                listeners.connect_timeouts_by_listener,
                kind="counter",
            ),
            LabelledSource(
                "xmq_certificate_reloads",
                "Certificate reloads per TLS listener.",
                "listener",
                lambda: {c.listener: c.reloads for c in listeners.tls_contexts},
                kind="counter",
            ),
        ]
        self.sources = sources  # adapters (the cluster) add theirs before the first scrape
        collector = BrokerCollector(broker, self.loop_lag.lag, sources)
        self.endpoint = ObservabilityEndpoint(
            build_registry(collector), self.readiness, self.loop_lag, config.max_loop_lag_s
        )

        async def listening() -> str | None:
            return None if listeners.accepting() else "not accepting connections"

        async def not_draining() -> str | None:
            return "draining" if is_draining() else None

        async def drain_action(query: Mapping[str, str]) -> str:
            count = await drain(query.get("server_reference"))
            return f"draining: {count} clients disconnected"

        self.readiness.add("listening", listening)
        self.readiness.add("draining", not_draining)
        self.endpoint.actions["drain"] = drain_action

    async def start(self) -> tuple[str, int] | None:
        """Start the lag probe and the HTTP endpoint; ``None`` when disabled or unbindable."""
        self.loop_lag.start()
        if not self.config.enabled:
            return None
        try:
            return await self.endpoint.start(self.config.host, self.config.port)
        except OSError as error:
            # Several nodes on one host (local clusters, workers) must not die for this.
            log.error(
                "metrics endpoint %s:%d unavailable: %s", self.config.host, self.config.port, error
            )
            return None

    async def stop(self) -> None:
        self.loop_lag.stop()
        await self.endpoint.stop()
