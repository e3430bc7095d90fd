"""MQTT wire primitives: variable byte integers, UTF-8 strings, binary data.

Readers take ``(buf, pos, end)`` where ``buf`` is ``bytes`` and ``end`` bounds the readable
region (the buffer may hold more bytes past it); they return the value and
the next position, and raise :class:`MalformedPacket` on any overrun or invalid encoding.
"""

from __future__ import annotations

import struct
from typing import TypeAlias

from xmq.codec.errors import MalformedPacket

Buffer: TypeAlias = bytes

U16 = struct.Struct("!H")
U32 = struct.Struct("!I")

#: Largest value a 4-byte variable byte integer holds.
VARINT_MAX = 268_435_455
#: Largest value of a two-byte length prefix.
LENGTH_MAX = 65_535

_VARINT_1 = [bytes((n,)) for n in range(128)]


def encode_varint(n: int) -> bytes:
    """Encode ``n`` (0..268,435,455) as an MQTT Variable Byte Integer."""
    if n < 128:
        if n < 0:
            raise ValueError(f"varint out of range: {n}")
        return _VARINT_1[n]
    if n > VARINT_MAX:
        raise ValueError(f"varint out of range: {n}")
    out = bytearray()
    while True:
        digit = n & 0x7F
        n >>= 7
        if n:
            out.append(digit | 0x80)
        else:
            out.append(digit)
            return bytes(out)


def encode_string(value: str) -> bytes:
    """Two-byte length prefix + UTF-8 (raises ValueError when too long or not encodable)."""
    data = value.encode("utf-8")
    if len(data) > LENGTH_MAX:
        raise ValueError(f"string longer than {LENGTH_MAX} bytes")
    return U16.pack(len(data)) + data


def encode_binary(value: bytes) -> bytes:
    """Two-byte length prefix + raw bytes."""
    if len(value) > LENGTH_MAX:
        raise ValueError(f"binary data longer than {LENGTH_MAX} bytes")
    return U16.pack(len(value)) + value


def read_varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """Decode a Variable Byte Integer at ``pos``: (value, position after it).

    The one decoder of the codec for a remaining length (in a fixed header, complete or not
    yet), a property length and a varint property. When ``end`` comes before the last byte it
    returns (0, 0): a reader waits for more bytes, a caller holding a whole packet raises.
    At most 4 bytes, minimal encoding only: else MalformedPacket.
    """
    value = 0
    shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if not byte and shift:
                raise MalformedPacket("non-minimal variable byte integer")
            return value, pos
        shift += 7
        if shift == 28:
            raise MalformedPacket("variable byte integer longer than 4 bytes")
    return 0, 0


def read_u16(buf: Buffer, pos: int, end: int) -> int:
    """Two-byte integer at ``pos`` (caller advances by 2)."""
    if pos + 2 > end:
        raise MalformedPacket("truncated two-byte integer")
    return (buf[pos] << 8) | buf[pos + 1]


def read_string(buf: Buffer, pos: int, end: int) -> tuple[str, int]:
    """UTF-8 Encoded String: valid UTF-8 (no surrogates) and no U+0000."""
    if pos + 2 > end:
        raise MalformedPacket("truncated string length")
    stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
    if stop > end:
        raise MalformedPacket("string runs past the packet")
    try:
        text = buf[pos + 2 : stop].decode()
    except UnicodeDecodeError as exc:
        raise MalformedPacket("string is not valid UTF-8") from exc
    if "\x00" in text:
        raise MalformedPacket("string contains U+0000")
    return text, stop


def read_binary(buf: Buffer, pos: int, end: int) -> tuple[bytes, int]:
    """Binary Data: two-byte length + bytes (copied)."""
    if pos + 2 > end:
        raise MalformedPacket("truncated binary length")
    stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
    if stop > end:
        raise MalformedPacket("binary data runs past the packet")
    return buf[pos + 2 : stop], stop


def end_of(name: str, pos: int, end: int) -> None:
    """A packet body ``name`` read up to ``pos`` must end there (``end``)."""
    if pos != end:
        raise MalformedPacket(f"{name}: {end - pos} unexpected trailing bytes")


__all__ = [
    "LENGTH_MAX",
    "U16",
    "U32",
    "VARINT_MAX",
    "Buffer",
    "encode_binary",
    "encode_string",
    "encode_varint",
    "end_of",
    "read_binary",
    "read_string",
    "read_u16",
    "read_varint",
]
