"""The streaming decoder: bytes in, complete packets out.

``PacketReader.feed`` is called from ``data_received`` with each chunk. When nothing is buffered
(the common case: a read holding whole packets) it decodes straight from the chunk by offsets;
only an incomplete tail is copied into the internal ``bytearray``, and a partial packet is not
looked at again until enough bytes for it have arrived (no quadratic re-scans of big packets).
The size limit is checked as soon as a fixed header is complete, before the body is waited for.

``feed(data, limit)`` decodes at most ``limit`` packets: the rest of the read is kept as it came
(the chunk and an offset, not copied; ``more`` is then True) and decoded by later calls
(``feed(b"", limit)``), so that a caller slicing its work per event-loop turn decodes no more of
a read than the turn handles. A malformed packet later in the read raises when it is reached.
"""

from __future__ import annotations

from xmq.codec.errors import LOW_LEVEL_ERRORS, MalformedPacket, PacketTooLarge, ProtocolError
from xmq.codec.packet_decoder import decode_body, decode_packet, decode_publish
from xmq.codec.packets import Connect, Packet
from xmq.codec.wire import read_varint

#: The largest packet MQTT can express: 1 + 4 header bytes + 268,435,455 body bytes.
MAX_PACKET_SIZE = 268_435_460

#: ``feed``'s default limit: every packet the bytes complete (a read holds fewer; within
#: mypyc's unboxed integers, so the per-packet comparison stays a machine one).
EVERY_PACKET = 1 << 40


class PacketReader:
    """Incremental MQTT decoder for one connection (either direction).

    ``protocol_version`` is 0 until a CONNECT is decoded (packets are then read by 3.1.1
    rules), or may be set by the caller (e.g. a client after sending its CONNECT). After a
    ProtocolError (whose ``decoded`` lists the packets completed before the bad one) the
    reader holds nothing; the connection is expected to close.
    """

    __slots__ = ("_needed", "_rest", "_rest_at", "max_packet_size", "pending", "protocol_version")

    def __init__(self, max_packet_size: int = MAX_PACKET_SIZE, protocol_version: int = 0) -> None:
        self.pending = bytearray()
        """The start of an incomplete packet (one object for the reader's life: a caller may
        test it for emptiness instead of calling ``buffered``)."""
        self._needed = 0
        self._rest: bytes | None = None  # a read ``feed`` stopped in at its limit ...
        self._rest_at = 0  # ... and where it stopped
        self.max_packet_size = max_packet_size
        self.protocol_version = protocol_version

    @property
    def buffered(self) -> int:
        """Number of bytes received but not yet decoded."""
        rest = self._rest
        return len(self.pending) + (len(rest) - self._rest_at if rest is not None else 0)

    @property
    def more(self) -> bool:
        """True when ``feed`` stopped at its limit with bytes left: ``feed(b"")`` goes on."""
        return self._rest is not None

    def feed(self, data: bytes | bytearray | memoryview, limit: int = EVERY_PACKET) -> list[Packet]:
        """Add received bytes; return the packets they complete, in order, at most ``limit``
        of them (the rest waits in the reader: ``more``)."""
        buffer = self.pending
        pos = 0
        rest = self._rest
        if rest is not None:  # the rest of a read that an earlier call stopped in
            self._rest = None
            pos = self._rest_at
            if data:  # more bytes came meanwhile (a transport that read on): join them
                buffer += memoryview(rest)[pos:]
                buffer += data
                src = bytes(buffer)
                buffer.clear()
                pos = 0
            else:
                src = rest
        elif buffer:
            buffer += data
            if len(buffer) < self._needed:
                return []
            src = bytes(buffer)
            buffer.clear()
        elif type(data) is bytes:
            src = data
        else:
            src = bytes(data)
        packets: list[Packet] = []
        end = len(src)
        largest = self.max_packet_size
        version = self.protocol_version
        needed = 0
        append = packets.append
        count = 0
        try:
            while end - pos > 1:
                if count == limit:  # the rest is decoded by the next calls
                    self._rest = src
                    self._rest_at = pos
                    self._needed = 0
                    return packets
                count += 1
                first = src[pos]
                length = src[pos + 1]
                header = 2
                if length > 0x7F:
                    length, header = read_varint(src, pos + 1, end)
                    if not header:
                        break
                    header -= pos
                total = header + length
                if total > largest:
                    raise PacketTooLarge(f"packet of {total} bytes exceeds the limit of {largest}")
                if end - pos < total:
                    needed = total
                    break
                start = pos + header
                pos += total
                if first & 0xF0 == 0x30:
                    packet: Packet = decode_publish(first & 0x0F, src, start, pos, version)
                else:
                    packet = decode_body(first, src, start, pos, version)
                append(packet)
                if first == 0x10 and isinstance(packet, Connect):
                    version = self.protocol_version = packet.protocol_version
        except ProtocolError as exc:
            self._needed = 0
            exc.decoded = packets
            raise
        except LOW_LEVEL_ERRORS as low:  # decode_publish leaves e.g. a bad topic to us
            # (a name of its own: mypyc types an except variable by its first clause)
            self._needed = 0
            error = MalformedPacket(f"undecodable packet: {low}")
            error.decoded = packets
            raise error from low
        self._needed = needed
        if pos < end:
            buffer += memoryview(src)[pos:]
        return packets


__all__ = ["MAX_PACKET_SIZE", "PacketReader", "decode_packet"]
