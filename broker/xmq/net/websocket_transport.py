"""MQTT over WebSocket (RFC 6455 via ``wsproto``): subprotocol ``mqtt``, a configurable path.

``WebSocketProtocol`` owns the TCP (or TLS) transport, runs the HTTP upgrade and the framing
with wsproto, and presents the MQTT protocol with a ``WebSocketTransport`` — an object with
the few transport methods ``MqttClientProtocol`` uses. The MQTT byte stream is carried in
binary messages; the per-tick coalesced output of a connection becomes one frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Iterable
from typing import Any, cast

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from xmq.net.client_protocol import MqttClientProtocol

log = logging.getLogger("xmq.net")

SUBPROTOCOLS = ("mqtt", "mqttv3.1")
_UNSUPPORTED_DATA = 1003
_PROTOCOL_ERROR = 1002
_MAY_ANSWER_CLOSE = (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING)
_REQUEST_END = re.compile(b"\n\r?\n")
"""Where h11 ends an HTTP request head (the first blank line; a GET upgrade has no body)."""
MAX_REQUEST_BYTES = 16384
"""h11's own limit on an incomplete request head; what we keep of the bytes before it."""


class WebSocketTransport:
    """The transport the MQTT protocol writes to: bytes in, binary WebSocket frames out."""

    __slots__ = ("_closing", "_outer")

    def __init__(self, outer: WebSocketProtocol) -> None:
        self._outer = outer
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing:
            self._outer.send_binary(bytes(data))

    def can_write_eof(self) -> bool:
        return False  # a WebSocket closes with a Close frame

    def mark_closed(self) -> None:
        self._closing = True

    def is_closing(self) -> bool:
        return self._closing or self._outer.transport_closing()

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._outer.close_websocket(1000)

    def abort(self) -> None:
        self._closing = True
        self._outer.abort()

    def pause_reading(self) -> None:
        self._outer.pause_reading()

    def resume_reading(self) -> None:
        self._outer.resume_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._outer.extra_info(name, default)


class WebSocketProtocol(asyncio.Protocol):
    """One WebSocket connection carrying one MQTT connection."""

    def __init__(
        self, inner: MqttClientProtocol, path: str, handshake_timeout_s: float = 0
    ) -> None:
        self.inner = inner
        self.path = path
        self.handshake_timeout_s = handshake_timeout_s
        self._deadline: asyncio.TimerHandle | None = None
        self.ws = WSConnection(ConnectionType.SERVER)
        self._transport: asyncio.Transport | None = None
        self._upgraded = False
        self._head = b""
        self._inner_transport = WebSocketTransport(self)

    # -- towards the socket -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        if self.handshake_timeout_s > 0:
            loop = asyncio.get_running_loop()
            self._deadline = loop.call_later(self.handshake_timeout_s, self._handshake_overdue)

    def _handshake_overdue(self) -> None:
        self._deadline = None
        if not self._upgraded:
            log.info("dropped websocket connection: no upgrade within the timeout")
            self.abort()

    def data_received(self, data: bytes) -> None:
        if not self._upgraded:
            self._handshake_received(data)
            return
        ws = self.ws
        try:
            ws.receive_data(data)
            self._handle(ws.events())
        except RemoteProtocolError as error:
            self._remote_error(error)
        except LocalProtocolError as error:  # an event we may no longer answer: close
            log.info("websocket error with %s: %s", self.inner.peer, error)
            self._close_transport()

    def _handshake_received(self, data: bytes) -> None:
        """Bytes before the upgrade: the request, perhaps followed by the first frames."""
        head = self._head + data
        self._head = head[:MAX_REQUEST_BYTES]
        try:
            self.ws.receive_data(data)
            for event in self.ws.events():
                if isinstance(event, Request):
                    self._upgrade(event)
                    break
        except RemoteProtocolError as error:
            self._remote_error(error)
            return
        if not self._upgraded:
            return
        self._head = b""
        end = _REQUEST_END.search(head)
        after = head[end.end() :] if end is not None else b""
        if after:  # frames that came in the same read as the request (one client write)
            self.data_received(after)

    def _handle(self, events: Iterable[Event]) -> None:
        inner = self.inner
        for event in events:
            if isinstance(event, BytesMessage):
                if event.data:  # a zero-length message (an empty-payload PUBLISH's frame)
                    inner.data_received(bytes(event.data))
            elif isinstance(event, Ping):
                if self.ws.state is ConnectionState.OPEN:
                    self._send(self.ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                # OPEN: wsproto's report of a frame it could not parse (code 1002, 1007...)
                if self.ws.state in _MAY_ANSWER_CLOSE:
                    self._send(self.ws.send(event.response()))
                self._close_transport()
                return
            elif isinstance(event, TextMessage):
                self.close_websocket(_UNSUPPORTED_DATA)
                return
            if self.transport_closing():
                return  # nothing after a close (by the MQTT side or a refused frame) counts

    def _remote_error(self, error: RemoteProtocolError) -> None:
        log.info("websocket error from %s: %s", self.inner.peer, error)
        hint = error.event_hint
        if isinstance(hint, CloseConnection):
            self.close_websocket(hint.code)
            return
        if hint is not None and self.ws.state is ConnectionState.CONNECTING:
            with contextlib.suppress(LocalProtocolError):
                self._send(self.ws.send(hint))
        self._close_transport()

    def _upgrade(self, request: Request) -> None:
        path = request.target.split("?", 1)[0]
        offered = [p for p in request.subprotocols if p in SUBPROTOCOLS]
        if path != self.path:
            self._reject(404, f"no MQTT endpoint at {path}")
            return
        if request.subprotocols and not offered:
            self._reject(400, "subprotocol mqtt required")
            return
        self._send(self.ws.send(AcceptConnection(subprotocol=offered[0] if offered else None)))
        self._upgraded = True
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self.inner.connection_made(cast(asyncio.Transport, self._inner_transport))

    def _reject(self, status: int, reason: str) -> None:
        body = reason.encode()
        headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
        self._send(
            self.ws.send(RejectConnection(status_code=status, headers=headers, has_body=True))
        )
        self._send(self.ws.send(RejectData(data=body)))
        self._close_transport()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._inner_transport.mark_closed()
        if self._upgraded:  # before the upgrade the MQTT side never saw a connection
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._upgraded:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self._upgraded:
            self.inner.resume_writing()

    def eof_received(self) -> bool | None:
        return None

    # -- used by WebSocketTransport -------------------------------------------------------

    def _send(self, data: bytes) -> None:
        transport = self._transport
        if data and transport is not None and not transport.is_closing():
            transport.write(data)

    def send_binary(self, data: bytes) -> None:
        if self.ws.state is ConnectionState.OPEN:
            self._send(self.ws.send(BytesMessage(data=data)))

    def close_websocket(self, code: int) -> None:
        if self.ws.state is ConnectionState.OPEN:
            self._send(self.ws.send(CloseConnection(code=code)))
        self._close_transport()

    def _close_transport(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def transport_closing(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def pause_reading(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def extra_info(self, name: str, default: Any = None) -> Any:
        if self._transport is None:
            return default
        return self._transport.get_extra_info(name, default)
