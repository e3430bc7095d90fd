"""What ``xmq serve`` needs before it starts, checked without starting it.

``xmq check-config`` runs every check; ``xmq serve`` runs them before it binds anything, so
that a bad file, a busy port or an unknown host is one line naming the field (and the file
or address) instead of a traceback half-way through the start:

- files: the accounts file (read and parsed), each TLS listener's certificate, key and CA
  (readable, PEM of the right kind, certificate and key a pair), the node-link TLS files,
  the admin token file;
- sockets: no two of the listeners, the metrics endpoint (and each worker's) and the node
  link (and each worker's) on the same port of overlapping addresses; each host resolves and
  each address can be bound now (port in use, address not on this machine, privileged port).
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass
from pathlib import Path

from xmq.app.cluster_redis import redis_url_of
from xmq.app.worker_plan import worker_count, worker_http_port
from xmq.auth.file_accounts import AccountsFileError, FileAccounts
from xmq.cluster.link_tls import LinkTlsError, link_tls_contexts
from xmq.config import BrokerConfig
from xmq.net.tls_contexts import TlsFilesError, check_tls_files
from xmq.observability.admin_access import AdminTokenError, read_admin_token


class StartupError(Exception):
    """Something ``serve`` needs is missing or unusable; the message is one line naming the
    configuration field and the file or address."""


@dataclass(frozen=True, slots=True)
class PlannedBind:
    """A socket the node (or one of its workers) will bind."""

    field: str
    """Where it is configured: ``listeners.0 (mqtt)``, ``metrics.port``, ``cluster.link_port``."""
    host: str
    port: int


def planned_binds(config: BrokerConfig) -> list[PlannedBind]:
    """Every listening socket of ``serve`` with this config (the supervisor's and workers')."""
    binds = [
        PlannedBind(f"listeners.{index} ({spec.name})", spec.host, spec.port)
        for index, spec in enumerate(config.listeners)
    ]
    workers = worker_count(config)
    metrics = config.metrics
    if metrics.enabled:
        binds.append(PlannedBind("metrics.port", metrics.host, metrics.port))
        if workers > 1:
            binds.extend(
                PlannedBind(
                    f"metrics.port + {1 + index} (worker {index})",
                    metrics.host,
                    worker_http_port(config, index),
                )
                for index in range(workers)
            )
    if redis_url_of(config):
        cluster = config.cluster
        for index in range(workers):
            port = cluster.link_port + index if cluster.link_port else 0
            where = "cluster.link_port" + (f" + {index} (worker {index})" if index else "")
            binds.append(PlannedBind(where, cluster.link_host, port))
    return binds


def _is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::")


def _addresses(bind: PlannedBind) -> list[tuple[int, tuple[str, int]]]:
    """(family, address) of every address the host resolves to, as ``create_server`` binds."""
    host = bind.host or None
    try:
        infos = socket.getaddrinfo(
            host, bind.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (socket.gaierror, UnicodeError) as error:
        reason = error.strerror if isinstance(error, socket.gaierror) else str(error)
        raise StartupError(f"{bind.field}: unknown host {bind.host!r}: {reason}") from error
    seen: list[tuple[int, tuple[str, int]]] = []
    for family, _kind, _proto, _name, address in infos:
        entry = (family, (str(address[0]), int(address[1])))
        if entry not in seen:
            seen.append(entry)
    return seen


def _overlap(a: list[tuple[int, tuple[str, int]]], b: list[tuple[int, tuple[str, int]]]) -> bool:
    """Whether two binds collide: one family (``0.0.0.0`` and ``::`` coexist, the IPv6
    socket being IPv6-only as asyncio makes it) and the same address or a wildcard."""
    for family_a, (host_a, _) in a:
        for family_b, (host_b, _) in b:
            if family_a != family_b:
                continue
            if host_a == host_b or _is_wildcard(host_a) or _is_wildcard(host_b):
                return True
    return False


def check_duplicates(binds: list[PlannedBind]) -> None:
    """Two sockets on one port of overlapping addresses (``0.0.0.0`` overlaps every address)."""
    resolved = [(bind, _addresses(bind)) for bind in binds]
    for index, (first, first_addresses) in enumerate(resolved):
        if first.port == 0:
            continue
        for second, second_addresses in resolved[index + 1 :]:
            if second.port == first.port and _overlap(first_addresses, second_addresses):
                raise StartupError(
                    f"{second.field}: port {second.port} on {second.host or '*'} is also "
                    f"{first.field} ({first.host or '*'}:{first.port})"
                )


_BIND_REASONS = {
    errno.EADDRINUSE: "is in use",
    errno.EADDRNOTAVAIL: "is not an address of this machine",
    errno.EACCES: "needs privileges (ports below 1024)",
}


def check_bindable(bind: PlannedBind) -> None:
    """Bind (and close) every address of ``bind`` the way the listener will."""
    for family, address in _addresses(bind):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
        except OSError as error:
            reason = _BIND_REASONS.get(error.errno or 0, f"cannot be bound: {error.strerror}")
            shown = f"[{address[0]}]" if family == socket.AF_INET6 else address[0]
            raise StartupError(f"{bind.field}: {shown}:{bind.port} {reason}") from error
        finally:
            sock.close()


def _readable(field: str, path: Path) -> None:
    try:
        with path.open("rb"):
            pass
    except OSError as error:
        raise StartupError(f"{field}: cannot read {path}: {error.strerror or error}") from error


def check_files(config: BrokerConfig) -> None:
    """The accounts, certificate and token files: present, readable, of the right kind."""
    accounts_file = config.auth.accounts_file
    if accounts_file is not None and config.auth.postgres_dsn is None:
        _readable("auth.accounts_file", accounts_file)
        try:
            FileAccounts.load(accounts_file)
        except (AccountsFileError, ValueError) as error:
            raise StartupError(f"auth.accounts_file: {accounts_file}: {error}") from error
    for index, spec in enumerate(config.listeners):
        if spec.tls is not None:
            try:
                check_tls_files(f"listeners.{index}.tls", spec.tls)
            except TlsFilesError as error:
                raise StartupError(str(error)) from error
    if config.cluster.link_tls is not None and redis_url_of(config):
        try:
            link_tls_contexts(config.cluster.link_tls)
        except LinkTlsError as error:
            raise StartupError(str(error)) from error
    token_file = config.metrics.admin_token_file
    if token_file is not None:
        try:
            read_admin_token(token_file)
        except AdminTokenError as error:
            raise StartupError(f"metrics.admin_token_file: {error}") from error


def check_startup(config: BrokerConfig, *, bind: bool = True) -> None:
    """Everything above; ``bind=False`` leaves out the test binds (a node already running)."""
    check_files(config)
    binds = planned_binds(config)
    check_duplicates(binds)
    if bind:
        for planned in binds:
            check_bindable(planned)


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines too) made one space."""
    return " ".join(text.split())
