"""Accepting connections that start with a PROXY protocol header (and TLS connections).

The listener accepts sockets itself, reads the header — exactly its bytes, nothing after
them — then hands the socket (and the real client address) to the event loop as an ordinary
accepted connection, with TLS when the listener has it, since the header comes before the
TLS handshake. A TLS listener without PROXY protocol accepts here too, without a header
(``read_header=False``): the hand-off then sees a failed TLS handshake with the socket it
came on, so it can name the peer (``net.listeners``, ``tls_contexts.HandshakeFailures``).

Reading: wait until the socket is readable, peek, consume the peeked bytes that belong to the
header (``proxy_header.header_part``), wait again. Nothing is left unread in the socket while
waiting, so a half-sent header costs nothing until its next bytes or its deadline (the
listener's connect timeout) come: no polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable

from xmq.net.proxy_header import ProxyHeaderError, header_part, looks_like_proxy_header

log = logging.getLogger("xmq.net")

HEADER_TIMEOUT_S = 5.0
"""The header's deadline when the listener has no connect timeout."""
_PEEK = 4096

Handoff = Callable[[socket.socket, str | None], Awaitable[None]]
"""Takes the accepted socket and the real peer (``ip:port``, ``None``: the socket's own)."""


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(sock.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(sock.fileno())


async def read_proxy_header(
    sock: socket.socket, required: bool, timeout_s: float = HEADER_TIMEOUT_S
) -> str | None:
    """Consume a PROXY header; return the client's ``ip:port`` (``None``: none / LOCAL).

    Optional mode: a connection whose first byte can't start a header has no header (nothing
    is consumed). A first byte that could (``P`` or CR: no MQTT, TLS or HTTP stream starts
    so) commits the connection to a header.
    """
    loop = asyncio.get_running_loop()
    buffered = b""
    async with asyncio.timeout(timeout_s):
        while True:
            await _readable(loop, sock)
            try:
                peeked = sock.recv(_PEEK, socket.MSG_PEEK)
            except BlockingIOError:
                continue
            if not peeked:
                raise ConnectionError("closed before the PROXY header")
            if not buffered and looks_like_proxy_header(peeked) is False:
                if required:
                    raise ProxyHeaderError("connection without the required PROXY header")
                return None
            count, header = header_part(buffered, peeked)
            buffered += sock.recv(count)  # peeked, so there: a non-blocking read of them
            if header is not None:
                if header.source is None:
                    return None
                host, port = header.source
                return f"{host}:{port}"


class ProxyProtocolServer:
    """Accept loop of one listening socket of a listener with ``proxy_protocol`` on (or of a
    TLS listener: ``read_header`` False, every socket handed off at once)."""

    def __init__(
        self,
        sock: socket.socket,
        required: bool,
        handoff: Handoff,
        timeout_s: float = HEADER_TIMEOUT_S,
        read_header: bool = True,
    ) -> None:
        self.sock = sock
        self.required = required
        self.read_header = read_header
        self.handoff = handoff
        self.timeout_s = timeout_s
        self._accepting: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self.sock.setblocking(False)
        self._accepting = asyncio.get_running_loop().create_task(
            self._accept_loop(), name=f"xmq-proxy-accept-{self.sock.getsockname()[1]}"
        )

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _address = await loop.sock_accept(self.sock)
            except OSError as error:  # EMFILE and friends: back off, keep listening
                log.warning("accept failed: %s", error)
                await asyncio.sleep(0.1)
                continue
            conn.setblocking(False)
            task = loop.create_task(self._admit(conn))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _admit(self, conn: socket.socket) -> None:
        peer = None
        if self.read_header:
            try:
                peer = await read_proxy_header(conn, self.required, self.timeout_s)
            except ConnectionError as error:
                # The peer closed first: a load balancer's health check, a port scan, or a
                # thousand half-sent headers closed at once, whose INFO lines would cost the
                # loop as much as the rest of their teardown together (40 ms per 1,000 in one
                # turn).
                log.debug("no PROXY header: %s", error)
                conn.close()
                return
            except (ProxyHeaderError, TimeoutError, OSError) as error:
                log.info("refused connection: %s", error)
                conn.close()
                return
        try:
            await self.handoff(conn, peer)
        except (OSError, ConnectionError, TimeoutError) as error:  # e.g. closed mid-handshake
            level = logging.INFO if self.read_header else logging.DEBUG
            log.log(level, "connection from %s failed: %s", peer or "-", error)
            conn.close()

    def close(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            self._accepting = None
        for task in list(self._pending):
            task.cancel()
        with contextlib.suppress(OSError):
            self.sock.close()
