"""Listening sockets: one asyncio server per configured listener."""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
from dataclasses import dataclass

from xmq.config import ListenerConfig
from xmq.core.auth_ports import Authenticator, Authorizer
from xmq.core.broker import Broker
from xmq.net.client_protocol import FlushScheduler, MqttClientProtocol

log = logging.getLogger("xmq.net")


@dataclass(frozen=True, slots=True)
class BoundListener:
    """Where a listener ended up (the port is resolved when 0 was configured)."""

    name: str
    protocol: str
    host: str
    port: int


class ListenerSet:
    """The broker's listeners and the client connections they accepted."""

    def __init__(
        self,
        broker: Broker,
        authenticator: Authenticator,
        authorizer: Authorizer,
        max_packet_size: int,
    ) -> None:
        self.broker = broker
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.max_packet_size = max_packet_size
        self.clients: set[MqttClientProtocol] = set()
        self.bound: list[BoundListener] = []
        self._servers: list[asyncio.Server] = []
        self._scheduler: FlushScheduler | None = None
        self.idle = asyncio.Event()
        self.idle.set()

    async def start(self, listeners: tuple[ListenerConfig, ...]) -> None:
        loop = asyncio.get_running_loop()
        self._scheduler = FlushScheduler(loop)
        for spec in listeners:
            if spec.protocol != "tcp":
                raise NotImplementedError(
                    f"listener {spec.name}: {spec.protocol} not supported yet"
                )
            server = await loop.create_server(
                functools.partial(self._new_client, spec),
                host=spec.host,
                port=spec.port,
                reuse_address=True,
                backlog=4096,
            )
            self._servers.append(server)
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    self.bound.append(BoundListener(spec.name, spec.protocol, host, port))
                    log.info("listening %s %s %s:%d", spec.name, spec.protocol, host, port)

    def _new_client(self, spec: ListenerConfig) -> MqttClientProtocol:
        assert self._scheduler is not None
        protocol = MqttClientProtocol(
            self.broker,
            self.authenticator,
            self.authorizer,
            self._scheduler,
            self.max_packet_size,
            on_close=self._closed,
        )
        self.clients.add(protocol)
        self.idle.clear()
        return protocol

    def _closed(self, protocol: MqttClientProtocol) -> None:
        self.clients.discard(protocol)
        if not self.clients:
            self.idle.set()

    def stop_accepting(self) -> None:
        """Close the listening sockets; accepted connections stay open."""
        for server in self._servers:
            server.close()
        self._servers.clear()
