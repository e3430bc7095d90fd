"""Ports between the broker core and the network adapter.

The network adapter (``xmq.net``) owns sockets; the core sees one ``ClientLink`` per
connection and never imports asyncio transports or sockets directly. The session's side of a
connection, ``SessionClient``, is a compiled base class in ``core.session_client`` (re-exported
here).
"""

from __future__ import annotations

from typing import Protocol

from xmq.core.session_client import SessionClient as SessionClient


class ClientLink(Protocol):
    """One client's network connection, as the core sees it."""

    peer: str
    """The client's address as ``ip:port`` (the real one when PROXY protocol is used)."""

    congested: bool
    """True while the transport's buffer is over its high-water mark: QoS 1/2 messages
    wait in the session queue instead of being written."""

    def write(self, data: bytes) -> None:
        """Queue bytes; the adapter coalesces writes and flushes once per loop tick."""

    def write_publish(self, head: bytes, packet_id: int, tail: bytes) -> None:
        """Queue a PUBLISH encoded as ``head + packet_id + tail``."""

    def writable(self) -> bool:
        """False while the transport's buffer is over its high-water mark."""

    def close(self) -> None:
        """Flush what is queued, then close the connection."""

    def abort(self) -> None:
        """Close at once, dropping what is queued."""

    def login_accepted(self) -> None:
        """The login was accepted: the adapter drops what guarded it (the connect deadline)."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...
