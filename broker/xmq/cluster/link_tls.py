"""Mutual TLS on the node links (``cluster.link_tls``).

Both ends present a certificate signed by the cluster's CA and verify the other's chain
against it. Host names are not checked: nodes dial the addresses in each other's leases (pod
IPs in Kubernetes), so being signed by the cluster CA is the identity. ``PeerLink`` runs
unchanged over the TLS transport.

Accepted connections do their TLS handshake in ``TlsLinkServer`` (an accept loop handing
each socket to ``connect_accepted_socket``) rather than in ``create_server(ssl=...)``, whose
failed handshakes asyncio and uvloop drop silently: here a peer whose certificate does not
verify is refused and logged with its address, and never becomes a link. (uvloop 0.23's
``start_tls`` on an accepted server-side transport never completes the handshake.)

``LinkTls.reload`` (SIGHUP, with the listeners' certificates) reads the three files again into
new contexts and swaps them in: links dialled or accepted afterwards use the new certificate
and CA, links already up keep their TLS session. Files that do not load are logged with the
file named and the contexts in use are kept.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from xmq.config import LinkTlsConfig

if TYPE_CHECKING:
    from xmq.cluster.peer_link import PeerLink

log = logging.getLogger("xmq.cluster.link")

HANDSHAKE_TIMEOUT_S = 5.0


class LinkTlsError(ValueError):
    """A link TLS file is missing or unusable (names the config field and the file)."""


class LinkTls:
    """The TLS contexts of one node: for links it accepts and for links it dials.

    Read ``server`` and ``client`` at each new link: ``reload`` replaces them.
    """

    __slots__ = ("client", "config", "reloads", "server")

    def __init__(self, config: LinkTlsConfig) -> None:
        self.config = config
        self.server, self.client = _contexts(config)
        self.reloads = 0

    def reload(self) -> bool:
        """Load the files again; on failure log the file and keep the contexts in use."""
        try:
            self.server, self.client = _contexts(self.config)
        except LinkTlsError as error:
            log.error("link TLS certificates not reloaded (old ones kept): %s", error)
            return False
        self.reloads += 1
        log.info("link TLS certificates reloaded from %s", self.config.cert_file)
        return True


def _context(server_side: bool, config: LinkTlsConfig) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server_side else ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(config.cert_file, config.key_file)
    context.load_verify_locations(cafile=config.ca_file)
    context.check_hostname = False  # the CA is the identity (pods are dialled by IP)
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def _check_files(config: LinkTlsConfig) -> None:
    """Name the file at fault: missing, or not PEM certificates (cert and CA files)."""
    for field in ("cert_file", "key_file", "ca_file"):
        path = getattr(config, field)
        if not path.is_file():
            raise LinkTlsError(f"cluster.link_tls.{field}: file not found: {path}")
    for field in ("ca_file", "cert_file"):
        path = getattr(config, field)
        try:  # parses every certificate of the file, whatever the key
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
        except (ssl.SSLError, OSError) as error:
            raise LinkTlsError(
                f"cluster.link_tls.{field}: cannot load the certificates from {path}: {error}"
            ) from error


def _contexts(config: LinkTlsConfig) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    _check_files(config)
    try:
        return _context(True, config), _context(False, config)
    except (ssl.SSLError, OSError) as error:
        raise LinkTlsError(
            f"cluster.link_tls: cannot load the certificates: {error} "
            f"(cert_file {config.cert_file}, key_file {config.key_file})"
        ) from error


def link_tls_contexts(config: LinkTlsConfig) -> LinkTls:
    """Load the certificate, key and CA; raise ``LinkTlsError`` naming what is wrong."""
    return LinkTls(config)


REFUSAL_WARNING_INTERVAL_S = 60.0
"""A peer refused for its certificate is re-dialled every second: one warning per peer and
direction in this interval, the repeats at debug level."""

_last_warning: dict[str, float] = {}


def log_refused(
    direction: str, address: str, error: BaseException, now: float | None = None
) -> None:
    """A TLS failure with a peer: a warning when it is about certificates, else debug."""
    closed = isinstance(error, ssl.SSLEOFError | ssl.SSLZeroReturnError | ConnectionError)
    if isinstance(error, ssl.SSLError) and not closed:
        now = time.monotonic() if now is None else now
        key = f"{direction} {address.rpartition(':')[0] or address}"  # inbound: any port
        last = _last_warning.get(key)
        if last is None or now - last >= REFUSAL_WARNING_INTERVAL_S:
            if len(_last_warning) > 1024:
                _last_warning.clear()
            _last_warning[key] = now
            log.warning("link %s %s refused: TLS: %s", direction, address, error)
            return
    log.debug("link %s %s: TLS handshake failed: %s", direction, address, error)


class TlsLinkServer:
    """The node link's accept loop with TLS: each accepted socket does its handshake in
    ``connect_accepted_socket`` (the peer verified against the CA), then becomes a link."""

    def __init__(self, factory: Callable[[], PeerLink], tls: LinkTls) -> None:
        self.factory = factory
        self.tls = tls  # its server context is read per handshake (reloads apply to new links)
        self.sock: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> int:
        """Bind and start accepting; return the bound port."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family, backlog=1024)
        sock.setblocking(False)
        self.sock = sock
        self._accepting = asyncio.get_running_loop().create_task(
            self._accept_loop(sock), name="link-tls-accept"
        )
        bound: int = sock.getsockname()[1]
        return bound

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, address = await loop.sock_accept(sock)
            except OSError as error:  # EMFILE and friends: back off, keep listening
                log.warning("link accept failed: %s", error)
                await asyncio.sleep(0.1)
                continue
            conn.setblocking(False)
            task = loop.create_task(self._handshake(conn, f"{address[0]}:{address[1]}"))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _handshake(self, conn: socket.socket, address: str) -> None:
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                self.factory, conn, ssl=self.tls.server, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S
            )
        except (OSError, TimeoutError, ConnectionError) as error:
            log_refused("from", address, error)
            conn.close()

    def close(self) -> None:
        """Stop accepting (links already up stay until the hub closes them)."""
        for task in (self._accepting, *self._pending):
            if task is not None:
                task.cancel()
        if self.sock is not None:
            self.sock.close()
            self.sock = None
