"""Ports between the broker core and the network adapter.

The network adapter (``xmq.net``) owns sockets; the core sees one ``ClientLink`` per
connection and never imports asyncio transports or sockets directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from xmq.core.message import Message


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


class SessionClient(Protocol):
    """A session's connected client, as the delivery side of the core sees it (implemented
    by ``core.connection.ClientConnection``): ``core.session`` and ``core.owed_writes`` write
    through it without importing the connection and, with it, its flows."""

    link: ClientLink
    version: int
    """Its MQTT protocol version (3, 4 or 5)."""
    send_window: int
    """How many QoS 1/2 messages it may have in flight (its Receive Maximum)."""

    def send_publish(
        self,
        message: Message,
        qos: int,
        retain: bool,
        subscription_ids: tuple[int, ...],
        packet_id: int,
        now: float,
        dup: bool = False,
    ) -> bool:
        """Write one PUBLISH (False when it exceeds the client's Maximum Packet Size)."""

    def accepts_qos0(self) -> bool:
        """Whether a QoS 0 PUBLISH would be written now (else it is dropped)."""

    def take_over(self) -> None:
        """Another connection claimed the session: close this one (0x8E)."""
