"""The streaming decoder: bytes in, complete packets out.

``PacketReader.feed`` is called from ``data_received`` with each chunk. When nothing is buffered
(the common case: a read holding whole packets) it decodes straight from the chunk by offsets;
only an incomplete tail is copied into the internal ``bytearray``, and a partial packet is not
looked at again until enough bytes for it have arrived (no quadratic re-scans of big packets).
The size limit is checked as soon as a fixed header is complete, before the body is waited for.
"""

from __future__ import annotations

from xmq.codec.errors import MalformedPacket, PacketTooLarge, ProtocolError
from xmq.codec.packet_decoder import LOW_LEVEL_ERRORS, decode_body, decode_packet, decode_publish
from xmq.codec.packets import Connect, Packet
from xmq.codec.wire import read_varint

#: The largest packet MQTT can express: 1 + 4 header bytes + 268,435,455 body bytes.
MAX_PACKET_SIZE = 268_435_460


class PacketReader:
    """Incremental MQTT decoder for one connection (either direction).

    ``protocol_version`` is 0 until a CONNECT is decoded (packets are then read by 3.1.1
    rules), or may be set by the caller (e.g. a client after sending its CONNECT). After a
    ProtocolError (whose ``decoded`` lists the packets completed before the bad one) the
    reader holds nothing; the connection is expected to close.
    """

    __slots__ = ("_needed", "max_packet_size", "pending", "protocol_version")

    def __init__(self, max_packet_size: int = MAX_PACKET_SIZE, protocol_version: int = 0) -> None:
        self.pending = bytearray()
        """The start of an incomplete packet (one object for the reader's life: a caller may
        test it for emptiness instead of calling ``buffered``)."""
        self._needed = 0
        self.max_packet_size = max_packet_size
        self.protocol_version = protocol_version

    @property
    def buffered(self) -> int:
        """Number of bytes received but not yet decoded."""
        return len(self.pending)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Packet]:
        """Add received bytes; return every packet they complete, in order."""
        buffer = self.pending
        if buffer:
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
        pos = 0
        end = len(src)
        limit = self.max_packet_size
        version = self.protocol_version
        needed = 0
        append = packets.append
        try:
            while end - pos > 1:
                first = src[pos]
                length = src[pos + 1]
                header = 2
                if length > 0x7F:
                    length, header = read_varint(src, pos + 1, end)
                    if not header:
                        break
                    header -= pos
                total = header + length
                if total > limit:
                    raise PacketTooLarge(f"packet of {total} bytes exceeds the limit of {limit}")
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
