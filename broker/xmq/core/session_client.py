"""A session's connected client, as the delivery side of the core sees it: a compiled base class.

``core.session`` and ``core.owed_writes`` write through it without importing the connection
(import-linter forbids them ``core.connection`` and its flows); ``core.connection``'s
``ClientConnection`` derives from it and implements it. It is a class, not a ``Protocol``:
compiled with the session and the connection, a call from ``Session.deliver`` to
``send_publish`` and the reads of ``send_window`` and ``link`` go through the native class (a
C call through its vtable, a field read), where through a ``Protocol`` each was a Python-level
method call with its argument parsing (~430 instructions) or a generic attribute lookup.

A compiled subclass only: a test stands a real ``ClientConnection`` over an in-memory link
(``tests/support/sink_link``), not a duck-typed stand-in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xmq.core.message import Message
    from xmq.core.ports import ClientLink


class SessionClient:
    """The client a session writes to (implemented by ``core.connection.ClientConnection``)."""

    __slots__ = ("link", "send_window", "version")

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
        raise NotImplementedError

    def accepts_qos0(self) -> bool:
        """Whether a QoS 0 PUBLISH would be written now (else it is dropped)."""
        raise NotImplementedError

    def take_over(self) -> None:
        """Another connection claimed the session: close this one (0x8E)."""
        raise NotImplementedError
