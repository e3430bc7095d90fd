"""One client's network connection, as the core sees it: a compiled base class.

The network adapter (``net.client_protocol.MqttClientProtocol``) derives from it and
implements it; the core (``core.connection``, its flows, ``owed_writes``) writes through it.
A class, not a ``Protocol``: compiled with the connection, ``link.write_publish(...)`` (every
PUBLISH) and ``link.write(...)`` (every ack) are C calls through the native class's vtable,
where through a ``Protocol`` each was a Python-level method call with its argument parsing
(~400-600 instructions a call). The adapter is not an ``asyncio.Protocol`` subclass for it
(a native class has one non-trait base): asyncio and uvloop call a protocol's methods by name.

Interpreted subclasses are allowed (``mypyc_attr``): the unit tests of the core stand
in-memory links (``tests/support/sink_link``) in for the socket. Their method overrides are
reached through the class's glue vtable (a Python-level call, as before); a compiled subclass
keeps the direct calls. ``congested`` is this class's own field: a subclass must not declare
it in its ``__slots__`` again (its own slot would shadow the field the core reads).
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr  # a runtime dependency (pyproject): a no-op when pure


@mypyc_attr(allow_interpreted_subclasses=True)
class ClientLink:
    """One client's network connection (implemented by ``net.client_protocol``)."""

    __slots__ = ("congested",)

    congested: bool
    """True while the transport's buffer is over its high-water mark: QoS 1/2 messages
    wait in the session queue instead of being written."""

    @property
    def peer(self) -> str:
        """The client's address as ``ip:port`` (the real one when PROXY protocol is used)."""
        raise NotImplementedError

    def write(self, data: bytes) -> None:
        """Queue bytes; the adapter coalesces writes and flushes once per loop tick."""
        raise NotImplementedError

    def write_publish(self, head: bytes, packet_id: int, tail: bytes) -> None:
        """Queue a PUBLISH encoded as ``head + packet_id + tail``."""
        raise NotImplementedError

    def flush(self) -> None:
        """Write what this turn queued (``core.turn_flush``, once per loop turn)."""
        raise NotImplementedError

    def flush_read(self, now: float) -> bool:
        """Write what a read callback queued, at its end (``TurnFlush.end_read``), unless this
        link was written at the same loop time ``now`` already: then False, and its output
        waits for the turn's flush (coalesced with the rest of the turn's). This base writes
        always; the adapter keeps the loop time of its last such write."""
        self.flush()
        return True

    def writable(self) -> bool:
        """False while the transport's buffer is over its high-water mark."""
        raise NotImplementedError

    def close(self) -> None:
        """Flush what is queued, then close the connection."""
        raise NotImplementedError

    def abort(self) -> None:
        """Close at once, dropping what is queued."""
        raise NotImplementedError

    def login_accepted(self) -> None:
        """The login was accepted: the adapter drops what guarded it (the connect deadline)."""
        raise NotImplementedError

    def pause_reading(self) -> None:
        raise NotImplementedError

    def resume_reading(self) -> None:
        raise NotImplementedError
