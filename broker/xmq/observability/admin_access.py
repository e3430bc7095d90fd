"""Who may call the admin endpoints (``POST /admin/...``) of a node's HTTP endpoint.

``/metrics``, ``/healthz`` and ``/readyz`` stay open (Prometheus and the kubelet read them);
the admin actions change the node (``/admin/drain`` moves every client away), so:

- with ``metrics.admin_token_file`` set, a request must carry ``Authorization: Bearer
  <token>`` with the file's content (surrounding whitespace ignored), from any address,
  loopback included; the comparison takes the same time wherever the tokens differ;
- without it, only requests from a loopback address (``127.0.0.0/8``, ``::1``) are served:
  the endpoint binds every interface for the probes, and any pod that can reach it must not
  be able to drain the node.

The file is read on every admin request, so a rotated Secret takes effect at once; an
unreadable or empty file refuses every admin request (503) instead of opening them.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("xmq.observability")

MIN_TOKEN_LENGTH = 16
"""Shortest admin token accepted (characters): a guessable token is no credential."""


class AdminTokenError(ValueError):
    """The admin token file is missing, unreadable, empty or too short."""


def read_admin_token(path: Path) -> bytes:
    """The token in ``path`` (whitespace around it removed)."""
    try:
        token = path.read_bytes().strip()
    except OSError as error:
        raise AdminTokenError(f"cannot read {path}: {error.strerror or error}") from error
    if len(token) < MIN_TOKEN_LENGTH:
        raise AdminTokenError(
            f"{path} holds {len(token)} characters, at least {MIN_TOKEN_LENGTH} are needed"
        )
    return token


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (a peer address) is a loopback address (IPv4-mapped too)."""
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


@dataclass(frozen=True, slots=True)
class AdminRefusal:
    status: int
    reason: str


@dataclass(frozen=True, slots=True)
class AdminAccess:
    """The admin endpoints' credential check (``token_file`` None: loopback only)."""

    token_file: Path | None = None

    def refusal(self, authorization: bytes | None, peer_host: str | None) -> AdminRefusal | None:
        """``None`` when the request may run the action, else the answer to give."""
        if self.token_file is None:
            if is_loopback(peer_host):
                return None
            return AdminRefusal(
                403, "admin endpoints answer loopback only (no metrics.admin_token_file)"
            )
        try:
            expected = read_admin_token(self.token_file)
        except AdminTokenError as error:
            log.error("admin request refused: metrics.admin_token_file: %s", error)
            return AdminRefusal(503, "admin token unavailable")
        scheme, _, presented = (authorization or b"").strip().partition(b" ")
        if scheme.lower() != b"bearer" or not presented.strip():
            return AdminRefusal(401, "admin endpoints need Authorization: Bearer <token>")
        # Digests of both: equal lengths, so the time taken says nothing about the token.
        presented_digest = hashlib.sha256(presented.strip()).digest()
        if not hmac.compare_digest(presented_digest, hashlib.sha256(expected).digest()):
            log.warning("admin request from %s refused: wrong token", peer_host or "-")
            return AdminRefusal(401, "wrong admin token")
        return None

    def header(self) -> str | None:
        """The ``Authorization`` value a local client (``xmq drain``, the supervisor) sends."""
        if self.token_file is None:
            return None
        return "Bearer " + read_admin_token(self.token_file).decode("utf-8", "replace")
