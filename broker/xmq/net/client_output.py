"""A client connection's output: packets kept per loop turn, written to its transport at once.

``ClientOutput`` is the base class of ``net.client_protocol.MqttClientProtocol`` (the reading
side) and implements the write half of the core's ``ClientLink`` (compiled with it: the core's
``link.write`` and ``link.write_publish`` are C calls through the native class's vtable).

Output is kept per connection (its first ``bytes``, then a list of the others) and written at the
end of the read callback that made it, or once per loop turn for a connection written at the
same loop time already (``FlushScheduler``, ``core.turn_flush``), so a burst of deliveries to
one client costs one ``write`` system call (when several reads of one turn write to it: one per
millisecond at most at the reads' ends, then one for the rest at the turn's end). A flush's
single packet (the common case: a PUBACK, one PUBLISH) is handed to the transport as the very
``bytes`` object the core made, kept in a slot of its own (no list appended to and cleared for
it: ~600 instructions a point-to-point message), several are joined once:
uvloop's ``write`` takes ``bytes`` as they are, where a ``bytearray`` cost it a ``memoryview``
and a ``cast('b')`` call per write (~1,100 instructions), on top of a new ``bytearray`` per
connection per turn.
A flush does not ask the transport ``is_closing()`` first (a Python-level call, ~270
instructions a write): the protocol knows when its transport stops taking bytes — its own
``close`` and ``abort``, the client's EOF (``eof_received``: the transport closes itself
next), ``connection_lost`` — and a transport that uvloop closed on an error meanwhile refuses
the write with ``RuntimeError``, which is dropped then if the transport says it is closing
(as the check did), raised otherwise (as the write did).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from xmq.codec.byte_values import u16
from xmq.core.client_link import ClientLink
from xmq.core.turn_flush import TurnFlush

if TYPE_CHECKING:
    from xmq.core.broker import Broker

LINGER_S = 2.0
"""How long a closed connection waits for the client to close its side."""


def _no_transport() -> bool:
    """``is_closing`` before the transport is up: nothing can be written yet."""
    return True


def _no_transport_write(data: bytes) -> None:
    raise RuntimeError("no transport yet")


class ClientOutput(ClientLink):
    """The transport of one client connection and what this turn writes to it."""

    __slots__ = (
        "_closing",
        "_first",
        "_flushed_ms",
        "_linger",
        "_loop",
        "_out",
        "_out_size",
        "_paused_writing",
        "_scheduler",
        "_stats",
        "_transport",
        "_transport_closing",
        "_transport_open",
        "_transport_write",
        "_write_limit",
    )

    def __init__(self, broker: Broker, scheduler: TurnFlush) -> None:
        self._transport: asyncio.Transport | None = None
        # the transport's ``write`` and ``is_closing``, bound once (``flush``, once a turn with
        # output): a method call on the transport looked the method up each time
        self._transport_write: Callable[[bytes], object] = _no_transport_write
        self._transport_closing: Callable[[], bool] = _no_transport
        # the transport is up and takes bytes: not before ``connection_made``, not after the
        # client's EOF (the transport closes then), ``close``, ``abort``, ``connection_lost``
        self._transport_open = False
        self._scheduler = scheduler
        # what this turn wrote, flushed once (``FlushScheduler``): the first packet (None: no
        # output), then the others
        self._first: bytes | None = None
        self._out: list[bytes] = []
        self._out_size = 0
        self._flushed_ms = -1  # the loop time (ms) of its last write at a read's end (flush_read)
        self._closing = False
        self._linger: asyncio.TimerHandle | None = None
        self._paused_writing = False
        self.congested = False
        self._write_limit = broker.settings.max_write_buffer_bytes
        self._stats = broker.stats
        self._loop = broker.loop

    def _attach(self, transport: asyncio.Transport) -> None:
        """The transport is up (``connection_made``): output goes to it from now on."""
        self._transport = transport
        self._transport_write = transport.write
        self._transport_closing = transport.is_closing
        self._transport_open = True

    # -- ClientLink -------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._closing:
            return
        if self._first is None:
            self._first = data
            self._scheduler.mark(self)
        else:
            self._out.append(data)
        self._out_size += len(data)

    def write_publish(self, head: bytes, packet_id: int, tail: bytes) -> None:
        if self._closing:
            return
        # one allocation (compiled, ``%b`` formatting of bytes is a single C copy of the
        # pieces): the packet id's two bytes from the codec's table (no ``to_bytes``)
        packet = b"%b%b%b" % (head, u16(packet_id), tail) if packet_id else head + tail
        if self._first is None:
            self._first = packet
            self._scheduler.mark(self)
        else:
            self._out.append(packet)
        self._out_size += len(packet)

    def flush_read(self, now: float) -> bool:
        # in whole milliseconds: uvloop's clock is libuv's (milliseconds already), asyncio's
        # is finer, and a write at each read of one busy turn would not coalesce at all there
        millisecond = int(now * 1000.0 + 0.5)
        if millisecond == self._flushed_ms:  # written in this millisecond: the turn's flush
            return False
        self._flushed_ms = millisecond
        self.flush()
        return True

    def writable(self) -> bool:
        return not self._paused_writing and self._out_size < self._write_limit

    def flush(self) -> None:
        data = self._first
        if data is None or not self._transport_open:  # (kept until the transport is up)
            return
        self._first = None
        self._stats.bytes_sent += self._out_size
        self._out_size = 0
        out = self._out
        if out:  # several packets: joined once (the list is kept, the transport holds bytes)
            out.insert(0, data)
            data = b"".join(out)
            out.clear()
        try:
            self._transport_write(data)
        except RuntimeError:  # uvloop's, once it closed the transport on an error
            if not self._transport_closing():
                raise

    def _drop_output(self) -> None:
        self._first = None
        self._out.clear()
        self._out_size = 0

    def close(self) -> None:
        if self._closing:
            return
        self.flush()
        self._closing = True
        transport = self._transport
        if transport is None:
            return
        if transport.can_write_eof() and not transport.is_closing():
            # Half-close and let the client close: closing at once with its bytes unread
            # (PUBACKs in flight) makes the kernel send RST, and a RST can destroy our last
            # packets (the DISCONNECT or CONNACK, queued PUBLISHes) before the client reads them.
            transport.write_eof()
            transport.resume_reading()
            self._linger = self._loop.call_later(LINGER_S, transport.close)
        else:
            transport.close()

    def abort(self) -> None:
        self._closing = True
        self._transport_open = False
        self._drop_output()
        if self._transport is not None:
            self._transport.abort()
