"""Server TLS contexts of the TLS and secure WebSocket listeners, and their reload.

A listener keeps one ``SSLContext`` for its whole life; a reload loads the new certificate
and key into that same context, so new handshakes use them while connections already open
keep their session. New files are first loaded into a scratch context: a broken or
half-written pair is refused (and logged) without touching the live one.

Failed handshakes (plain MQTT or garbage on a TLS port, a client certificate from another
CA, a client that refuses our certificate) are counted per listener and OpenSSL reason for
``/metrics`` and logged at most once a minute per reason, with the count of the others and
the peer (``ip:port``) of the one logged. A TLS listener accepts its sockets itself
(``bind_sockets``, ``proxy_accept``) and hands each to ``loop.connect_accepted_socket``,
which raises the handshake's ``SSLError`` where the socket is known (the loop's own TLS
server would fail it where no code of ours sees the connection). A client that connects and
closes without a handshake (a port check) is not a failure.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from xmq.config import TlsConfig

log = logging.getLogger("xmq.net")

_VERIFY_MODES = {
    "none": ssl.CERT_NONE,
    "optional": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class TlsFilesError(ValueError):
    """A listener's certificate, key or CA file is missing or unusable (names field and file)."""


def _pem_text(field: str, path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError as error:
        raise TlsFilesError(f"{field}: cannot read {path}: {error.strerror or error}") from error


def check_tls_files(field: str, config: TlsConfig) -> None:
    """Raise ``TlsFilesError`` naming ``field.<key>`` and the path if a file is missing or not
    what it should be (a key given as the certificate, a pair that does not match)."""
    cert = _pem_text(f"{field}.cert_file", config.cert_file)
    if "-----BEGIN CERTIFICATE-----" not in cert:
        what = "a private key" if "PRIVATE KEY-----" in cert else "no PEM certificate"
        raise TlsFilesError(
            f"{field}.cert_file: {config.cert_file} holds {what}, not a certificate"
        )
    key = _pem_text(f"{field}.key_file", config.key_file)
    if "PRIVATE KEY-----" not in key:
        what = "a certificate" if "-----BEGIN CERTIFICATE-----" in key else "no PEM private key"
        raise TlsFilesError(f"{field}.key_file: {config.key_file} holds {what}, not a private key")
    if config.ca_file is not None:
        _pem_text(f"{field}.ca_file", config.ca_file)
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=config.ca_file)
        except (ssl.SSLError, OSError) as error:
            raise TlsFilesError(
                f"{field}.ca_file: cannot load the CA certificates from {config.ca_file}: {error}"
            ) from error
    try:
        _new_context(config)
    except (ssl.SSLError, OSError) as error:
        reason = getattr(error, "reason", None)
        if reason == "KEY_VALUES_MISMATCH":
            raise TlsFilesError(
                f"{field}: certificate {config.cert_file} and key {config.key_file} are not a pair"
            ) from error
        raise TlsFilesError(
            f"{field}: cannot load certificate {config.cert_file} with key {config.key_file}: "
            f"{error}"
        ) from error


def _load_into(context: ssl.SSLContext, config: TlsConfig) -> None:
    context.load_cert_chain(str(config.cert_file), str(config.key_file))
    if config.ca_file is not None:
        context.load_verify_locations(cafile=str(config.ca_file))


def _new_context(config: TlsConfig) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _VERSIONS[config.min_version]
    context.verify_mode = _VERIFY_MODES[config.client_certs]
    _load_into(context, config)
    return context


LOG_INTERVAL_S = 60.0
"""A listener logs each kind of handshake failure at most once per this many seconds."""
MAX_REASONS = 32
"""Distinct reasons counted per listener; rarer ones are counted as ``other``."""


def failure_reason(error: ssl.SSLError) -> str:
    """``wrong_version_number``, ``certificate_verify_failed``, ``tlsv1_alert_unknown_ca``..."""
    reason = getattr(error, "reason", None)
    if isinstance(reason, str) and reason:
        return reason.lower()
    return type(error).__name__.lower()


class HandshakeFailures:
    """A listener's failed TLS handshakes: counts by reason and a rate-limited log line."""

    def __init__(self, listener: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.listener = listener
        self.clock = clock
        self.by_reason: dict[str, int] = {}
        self._logged_at: dict[str, float] = {}
        self._unlogged: dict[str, int] = {}

    def failed(self, error: ssl.SSLError, peer: str) -> None:
        """A handshake with ``peer`` (``ip:port``) failed: count it; log it unless a line of
        the same reason went out less than ``LOG_INTERVAL_S`` ago."""
        reason = failure_reason(error)
        if reason not in self.by_reason and len(self.by_reason) >= MAX_REASONS:
            reason = "other"
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1
        now = self.clock()
        last = self._logged_at.get(reason)
        if last is not None and now - last < LOG_INTERVAL_S:
            self._unlogged[reason] = self._unlogged.get(reason, 0) + 1
            return
        self._logged_at[reason] = now
        others = self._unlogged.pop(reason, 0)
        more = f" ({others} more since the last line)" if others else ""
        log.warning(
            "listener %s: TLS handshake with %s failed: %s%s; %d in all",
            self.listener,
            peer,
            error,
            more,
            self.by_reason[reason],
        )


def peer_of(sock: socket.socket) -> str:
    """``ip:port`` of an accepted socket's peer (``-`` once it is gone)."""
    try:
        address = sock.getpeername()
    except OSError:
        return "-"
    return f"{address[0]}:{address[1]}"


def bind_sockets(host: str, port: int, reuse_port: bool, backlog: int) -> list[socket.socket]:
    """Listening sockets on every address of ``host`` (as ``loop.create_server`` binds them),
    for a TLS listener that accepts its connections itself (``proxy_accept``)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    seen: set[tuple[int, str]] = set()
    try:
        for family, kind, proto, _name, address in infos:
            if (family, str(address[0])) in seen:
                continue
            seen.add((family, str(address[0])))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class ReloadableTlsContext:
    """One listener's server context; ``reload_if_changed`` is cheap (two ``stat`` calls)."""

    def __init__(self, listener: str, config: TlsConfig) -> None:
        self.listener = listener
        self.config = config
        self.context = _new_context(config)
        self.handshake_failures = HandshakeFailures(listener)
        self.reloads = 0
        self._stamp = self._file_stamp()

    def _files(self) -> list[Path]:
        files = [self.config.cert_file, self.config.key_file]
        if self.config.ca_file is not None:
            files.append(self.config.ca_file)
        return files

    def _file_stamp(self) -> tuple[tuple[int, int], ...]:
        stamps = []
        for file in self._files():
            try:
                info = file.stat()
            except OSError:
                stamps.append((-1, -1))
            else:
                stamps.append((info.st_mtime_ns, info.st_size))
        return tuple(stamps)

    def reload(self) -> bool:
        """Load the files again; return False (live context untouched) if they are broken."""
        self._stamp = self._file_stamp()
        try:
            _new_context(self.config)  # validate first
            _load_into(self.context, self.config)
        except (OSError, ssl.SSLError) as error:
            log.error("listener %s: certificate reload failed: %s", self.listener, error)
            return False
        self.reloads += 1
        log.info("listener %s: certificates reloaded", self.listener)
        return True

    def reload_if_changed(self) -> bool:
        if self._file_stamp() == self._stamp:
            return False
        return self.reload()


class CertificateWatcher:
    """Polls the certificate files of every TLS listener and reloads the ones that changed."""

    def __init__(self, contexts: list[ReloadableTlsContext]) -> None:
        self.contexts = contexts
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        intervals = [c.config.reload_interval_s for c in self.contexts]
        intervals = [i for i in intervals if i > 0]
        if intervals:
            self._task = asyncio.get_running_loop().create_task(
                self._poll(min(intervals)), name="xmq-certificate-watcher"
            )

    async def _poll(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            for context in self.contexts:
                if context.config.reload_interval_s > 0:
                    context.reload_if_changed()

    def reload_all(self) -> int:
        return sum(1 for context in self.contexts if context.reload())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None


def certificate_common_name(transport: asyncio.BaseTransport) -> str | None:
    """The verified client certificate's Common Name, if the client sent one."""
    peercert = transport.get_extra_info("peercert")
    if not peercert:
        return None
    subject: tuple[tuple[tuple[str, str], ...], ...] = peercert.get("subject", ())
    for rdn in subject:
        for key, value in rdn:
            if key == "commonName":
                return value
    return None


CommonNameHook = Callable[[asyncio.BaseTransport], str | None]
