"""Listening sockets: one server per configured listener (TCP, TLS, WebSocket, secure WS).

Each listener has a ``ListenerGate`` (open connections, limits, connection rate), optional
TLS context (reloadable), optional WebSocket framing and optional PROXY protocol. The MQTT
protocol object is the same for all of them; only listeners with a publish rate use the
throttled subclass, and connections over a limit get a protocol that refuses their CONNECT.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from xmq.config import ListenerConfig
from xmq.core.auth_ports import Authenticator, Authorizer
from xmq.core.broker import Broker
from xmq.core.connection_states import AWAIT_CONNECT
from xmq.core.login_input import login_overdue
from xmq.net.admission import ListenerGate, RefusedClientProtocol
from xmq.net.certificate_auth import CertificateUserAuthenticator
from xmq.net.client_protocol import FlushScheduler, MqttClientProtocol
from xmq.net.listener_errors import ListenerStartError as ListenerStartError
from xmq.net.proxy_accept import HEADER_TIMEOUT_S, ProxyProtocolServer
from xmq.net.publish_throttle import ThrottledClientProtocol
from xmq.net.tls_contexts import (
    CertificateWatcher,
    ReloadableTlsContext,
    bind_sockets,
    certificate_common_name,
    peer_of,
)
from xmq.net.websocket_transport import WebSocketProtocol

log = logging.getLogger("xmq.net")


@dataclass(frozen=True, slots=True)
class BoundListener:
    """Where a listener ended up (the port is resolved when 0 was configured)."""

    name: str
    protocol: str
    host: str
    port: int


MadeHook = Callable[[MqttClientProtocol, asyncio.Transport], None]
CloseHook = Callable[[MqttClientProtocol], None]


class ListenerSet:
    """The broker's listeners and the client connections they accepted."""

    def __init__(
        self,
        broker: Broker,
        authenticator: Authenticator,
        authorizer: Authorizer,
        max_packet_size: int,
        max_connections: int = 0,
        reuse_port: bool = False,
    ) -> None:
        self.broker = broker
        self.reuse_port = reuse_port  # SO_REUSEPORT: worker processes share each port
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.max_packet_size = max_packet_size
        self.max_connections = max_connections
        self.clients: set[MqttClientProtocol] = set()
        self.bound: list[BoundListener] = []
        self.gates: dict[str, ListenerGate] = {}
        self.tls_contexts: list[ReloadableTlsContext] = []
        self.certificates = CertificateWatcher(self.tls_contexts)
        self.open_total = 0
        self._servers: list[asyncio.Server] = []
        self._proxy_servers: list[ProxyProtocolServer] = []
        self._scheduler: FlushScheduler | None = None
        self._hooks: dict[tuple[ListenerGate, bool], tuple[MadeHook, CloseHook]] = {}
        self.idle = asyncio.Event()
        self.idle.set()

    async def start(self, listeners: tuple[ListenerConfig, ...]) -> None:
        loop = asyncio.get_running_loop()
        self._scheduler = self.broker.turn_flush  # (the node links' too: one callback a turn)
        for index, spec in enumerate(listeners):
            try:
                await self._start_one(loop, spec)
            except (OSError, ssl.SSLError) as error:
                raise ListenerStartError(
                    f"listeners.{index} ({spec.name}): {spec.host}:{spec.port}: {error}"
                ) from error
        self.certificates.start()

    async def _start_one(self, loop: asyncio.AbstractEventLoop, spec: ListenerConfig) -> None:
        gate = ListenerGate(
            spec.name,
            spec.max_connections,
            spec.max_connection_rate,
            spec.connection_rate_burst,
            loop.time(),
        )
        self.gates[spec.name] = gate
        tls = None
        if spec.tls is not None:
            tls = ReloadableTlsContext(spec.name, spec.tls)
            self.tls_contexts.append(tls)
        context = tls.context if tls is not None else None
        # A TLS handshake counts against the connect timeout too.
        handshake_s = (spec.connect_timeout_s or None) if context is not None else None
        if spec.proxy_protocol == "off" and tls is None:
            server = await loop.create_server(
                lambda: self._new_connection(spec, gate, None),
                host=spec.host,
                port=spec.port,
                ssl=context,
                ssl_handshake_timeout=handshake_s,
                reuse_address=True,
                reuse_port=self.reuse_port or None,
                backlog=4096,
            )
            self._servers.append(server)
            # read untyped: uvloop's server gives a list where typeshed says tuple, and this
            # module is compiled (a typed read checks the type and refused it at start-up)
            listening: Any = server
            sockets = list(listening.sockets)
        else:
            # PROXY protocol, or TLS: sockets accepted here and handed to the loop, so that a
            # failed handshake is seen with its socket (its peer logged: HandshakeFailures)
            if spec.proxy_protocol == "off":
                sockets = bind_sockets(spec.host, spec.port, self.reuse_port, backlog=4096)
            else:
                family = socket.AF_INET6 if ":" in spec.host else socket.AF_INET
                sockets = [
                    socket.create_server(
                        (spec.host, spec.port),
                        family=family,
                        backlog=4096,
                        reuse_port=self.reuse_port,
                    )
                ]

            async def handoff(conn: socket.socket, peer: str | None) -> None:
                if tls is None:
                    await loop.connect_accepted_socket(
                        lambda: self._new_connection(spec, gate, peer), conn
                    )
                    return
                address = peer or peer_of(conn)  # before the loop owns (and may close) it
                try:
                    await loop.connect_accepted_socket(
                        lambda: self._new_connection(spec, gate, peer),
                        conn,
                        ssl=context,
                        ssl_handshake_timeout=handshake_s,
                    )
                except ssl.SSLError as error:
                    tls.handshake_failures.failed(error, address)
                    conn.close()

            for sock in sockets:
                proxy_server = ProxyProtocolServer(
                    sock,
                    spec.proxy_protocol == "required",
                    handoff,
                    spec.connect_timeout_s or HEADER_TIMEOUT_S,
                    read_header=spec.proxy_protocol != "off",
                )
                proxy_server.start()
                self._proxy_servers.append(proxy_server)
        for sock in sockets:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                host, port = sock.getsockname()[:2]
                self.bound.append(BoundListener(spec.name, spec.protocol, host, port))
                log.info("listening %s %s %s:%d", spec.name, spec.protocol, host, port)

    # -- connections ----------------------------------------------------------------------

    def _new_connection(
        self, spec: ListenerConfig, gate: ListenerGate, peer: str | None
    ) -> asyncio.Protocol:
        client = self._new_client(spec, gate, peer)
        if spec.protocol in ("ws", "wss"):
            return WebSocketProtocol(client, spec.ws_path, spec.connect_timeout_s)
        # duck-typed: an asyncio protocol by its methods, a compiled ``ClientLink`` by class
        return cast(asyncio.Protocol, client)

    def _new_client(
        self, spec: ListenerConfig, gate: ListenerGate, peer: str | None
    ) -> MqttClientProtocol:
        assert self._scheduler is not None
        broker = self.broker
        refusal = gate.refusal(broker.loop.time(), self.open_total, self.max_connections)
        client: MqttClientProtocol
        if refusal is not None:
            refused = RefusedClientProtocol(
                broker, self.authenticator, self.authorizer, self._scheduler, self.max_packet_size
            )
            refused.set_refusal(*refusal)
            client = refused
        elif spec.publish_rate > 0:
            client = ThrottledClientProtocol(
                broker,
                self.authenticator,
                self.authorizer,
                self._scheduler,
                self.max_packet_size,
                spec.publish_rate,
                spec.publish_burst,
                on_throttle=gate.count_throttled,
            )
        else:
            client = MqttClientProtocol(
                broker, self.authenticator, self.authorizer, self._scheduler, self.max_packet_size
            )
        admitted = refusal is None
        if peer is None:  # the same hooks for every connection of this listener
            hooks = self._hooks.get((gate, admitted))
            if hooks is None:
                hooks = (
                    self._made_hook(gate, admitted, None, spec),
                    self._close_hook(gate, admitted),
                )
                self._hooks[gate, admitted] = hooks
            client.on_made, client.on_close = hooks
        else:
            client.on_made = self._made_hook(gate, admitted, peer, spec)
            client.on_close = self._close_hook(gate, admitted)
        return client

    def _made_hook(
        self, gate: ListenerGate, admitted: bool, peer: str | None, spec: ListenerConfig
    ) -> Callable[[MqttClientProtocol, asyncio.Transport], None]:
        cn_as_username = spec.tls is not None and spec.tls.cn_as_username
        broker = self.broker
        timeout_s = spec.connect_timeout_s

        def on_deadline(client: MqttClientProtocol) -> None:
            self._connect_deadline(client, gate)

        def made(client: MqttClientProtocol, transport: asyncio.Transport) -> None:
            clients = self.clients
            if not clients:  # (``idle`` is set exactly while there are none: one call less)
                self.idle.clear()
            clients.add(client)
            if timeout_s > 0:  # the shared wheel: no timer per connection
                client.on_deadline = on_deadline
                broker.deadlines.add(client, broker.now() + timeout_s)
            if admitted:
                gate.open += 1
                self.open_total += 1
            if peer is not None:
                client.peer = peer
            if cn_as_username:
                common_name = certificate_common_name(transport)
                if common_name:
                    client.conn.authenticator = CertificateUserAuthenticator(
                        self.authenticator, common_name
                    )

        return made

    def _connect_deadline(self, client: MqttClientProtocol, gate: ListenerGate) -> None:
        """The connect timeout: a client that has not sent its CONNECT, or whose login still
        waits for it (an unfinished AUTH exchange) or for its password check, is dropped."""
        conn = client.conn
        if client in self.clients and login_overdue(conn):
            gate.connect_timeouts += 1
            what = "CONNECT" if conn.state == AWAIT_CONNECT else "finished login"
            log.info("dropped %s: no %s within the connect timeout", client.peer, what)
            client.abort()

    def _close_hook(
        self, gate: ListenerGate, admitted: bool
    ) -> Callable[[MqttClientProtocol], None]:
        def closed(client: MqttClientProtocol) -> None:
            if client.wheel_slot:
                self.broker.deadlines.remove(client)
            if client in self.clients:
                self.clients.discard(client)
                if admitted:
                    gate.open -= 1
                    self.open_total -= 1
            if not self.clients:
                self.idle.set()

        return closed

    # -- metrics and lifecycle ------------------------------------------------------------

    def connections_by_listener(self) -> dict[str, float]:
        return {name: gate.open for name, gate in self.gates.items()}

    def throttled_by_listener(self) -> dict[str, float]:
        return {name: gate.throttled for name, gate in self.gates.items()}

    def connect_timeouts_by_listener(self) -> dict[str, float]:
        return {name: gate.connect_timeouts for name, gate in self.gates.items()}

    def accepting(self) -> bool:
        return bool(self._servers or self._proxy_servers)

    def reload_certificates(self) -> int:
        return self.certificates.reload_all()

    def stop_accepting(self) -> None:
        """Close the listening sockets; accepted connections stay open."""
        for server in self._servers:
            server.close()
        self._servers.clear()
        for proxy_server in self._proxy_servers:
            proxy_server.close()
        self._proxy_servers.clear()
        self.certificates.stop()
