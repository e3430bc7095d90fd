"""Encode and decode MQTT 5 property lists, enforcing spec §2.2.2 rules.

Decoding rules: an unknown identifier, or one the packet type may not carry, makes the packet
malformed (0x81); a single-valued property given twice, a 0/1 flag with another value, and a
zero Receive Maximum / Maximum Packet Size / Subscription Identifier are Protocol Errors (0x82).
Topic Alias 0 is left to the protocol layer (it answers 0x94).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

from xmq.codec.errors import MalformedPacket, ProtocolViolation
from xmq.codec.properties import (
    ALLOWED_PROPERTIES,
    BOOLEAN_PROPERTIES,
    NONZERO_PROPERTIES,
    PROPERTY_TABLE,
    Properties,
    PropertyId,
    PropertyKind,
    blank_properties,
)
from xmq.codec.wire import (
    U16,
    U32,
    Buffer,
    encode_binary,
    encode_string,
    encode_varint,
    read_binary,
    read_string,
    read_varint,
)

_BYTE = PropertyKind.BYTE
_U16 = PropertyKind.U16
_U32 = PropertyKind.U32
_VARINT = PropertyKind.VARINT
_STRING = PropertyKind.STRING
_BINARY = PropertyKind.BINARY
_PAIR = PropertyKind.STRING_PAIR

_SUBSCRIPTION_IDENTIFIER = int(PropertyId.SUBSCRIPTION_IDENTIFIER)
_USER_PROPERTY = int(PropertyId.USER_PROPERTY)
_SUBSCRIBE = 8

# Flags of a decode table entry.
_REPEATS = 1  # may appear more than once (User Property; Subscription Identifier in PUBLISH)
_BOOLEAN = 2  # byte that must be 0 or 1
_NONZERO = 4  # 0 is a Protocol Error

# Per packet type: 256 entries indexed by identifier byte, None when the identifier is unknown
# or not allowed for that type, else (attribute name, kind, flags).
_DecodeEntry = tuple[str, PropertyKind, int]
_DECODE_TABLES: dict[int, list[_DecodeEntry | None]] = {}
for _ptype, _allowed in ALLOWED_PROPERTIES.items():
    _table: list[_DecodeEntry | None] = [None] * 256
    for _pid in _allowed:
        _name, _kind = PROPERTY_TABLE[_pid]
        _flags = (_BOOLEAN if _pid in BOOLEAN_PROPERTIES else 0) | (
            _NONZERO if _pid in NONZERO_PROPERTIES else 0
        )
        if _pid == _USER_PROPERTY or (_pid == _SUBSCRIPTION_IDENTIFIER and _ptype != _SUBSCRIBE):
            _flags |= _REPEATS
        _table[_pid] = (_name, _kind, _flags)
    _DECODE_TABLES[_ptype] = _table


def _no_values(props: Any) -> tuple[()]:
    return ()


# Per packet type: the (id, kind) of each property it may carry, in id order, and a getter
# fetching all their values in one C-level call (a tuple even for a single property).
_ENCODE_PLAN: dict[int, tuple[tuple[tuple[int, PropertyKind], ...], Callable[[Any], Any]]] = {}
for _ptype, _allowed in ALLOWED_PROPERTIES.items():
    _ids = sorted(_allowed)
    _names = [PROPERTY_TABLE[_pid][0] for _pid in _ids]
    _getter: Callable[[Any], Any]
    if len(_names) > 1:
        _getter = attrgetter(*_names)
    elif _names:
        _getter = attrgetter(_names[0], _names[0])  # a tuple; zip() stops at the plan's end
    else:
        _getter = _no_values

    _ENCODE_PLAN[_ptype] = (tuple((int(_pid), PROPERTY_TABLE[_pid][1]) for _pid in _ids), _getter)


def decode_properties(
    buf: Buffer, pos: int, end: int, packet_type: int
) -> tuple[Properties | None, int]:
    """Read a property length and list at ``pos``; returns (properties or None, next pos).

    ``packet_type`` is the control packet type (1..15) or ``WILL_PROPERTIES`` (0).
    """
    if pos >= end:
        raise MalformedPacket("missing property length")
    length = buf[pos]
    if length < 0x80:
        if not length:
            return None, pos + 1
        pos += 1
    else:
        length, pos = read_varint(buf, pos, end)
        if not pos:
            raise MalformedPacket("truncated property length")
    stop = pos + length
    if stop > end:
        raise MalformedPacket("property list runs past the packet")
    table = _DECODE_TABLES[packet_type]
    props = blank_properties()
    seen = 0
    while pos < stop:
        pid = buf[pos]
        pos += 1
        entry = table[pid]
        if entry is None:
            raise MalformedPacket(f"property 0x{pid:02x} not allowed in packet type {packet_type}")
        name, kind, flags = entry
        value: Any
        if kind is _STRING:
            value, pos = read_string(buf, pos, stop)
        elif kind is _BYTE:
            if pos >= stop:
                raise MalformedPacket("truncated property")
            value = buf[pos]
            pos += 1
            if value > 1 and flags & _BOOLEAN:
                raise ProtocolViolation(f"property 0x{pid:02x} must be 0 or 1")
        elif kind is _U16:
            if pos + 2 > stop:
                raise MalformedPacket("truncated property")
            value = (buf[pos] << 8) | buf[pos + 1]
            pos += 2
        elif kind is _U32:
            if pos + 4 > stop:
                raise MalformedPacket("truncated property")
            value = U32.unpack_from(buf, pos)[0]
            pos += 4
        elif kind is _PAIR:
            key, pos = read_string(buf, pos, stop)
            text, pos = read_string(buf, pos, stop)
            value = (key, text)
        elif kind is _VARINT:
            value, pos = read_varint(buf, pos, stop)
            if not pos:
                raise MalformedPacket("truncated property")
        else:
            value, pos = read_binary(buf, pos, stop)
        if flags & _NONZERO and not value:
            raise ProtocolViolation(f"property 0x{pid:02x} must not be 0")
        bit = 1 << pid
        if seen & bit:
            if not flags & _REPEATS:
                raise ProtocolViolation(f"property 0x{pid:02x} given twice")
            getattr(props, name).append(value)
        else:
            seen |= bit
            setattr(props, name, [value] if kind is _PAIR or kind is _VARINT else value)
    return props, pos


def encode_properties(props: Properties | None, packet_type: int) -> bytes:
    """The property length followed by the property list (b"\\x00" when there are none).

    Only the properties ``packet_type`` may carry are written (others are ignored).
    """
    if props is None:
        return b"\x00"
    plan, getter = _ENCODE_PLAN[packet_type]
    out = bytearray()
    for (pid, kind), value in zip(plan, getter(props), strict=False):
        if value is None:
            continue
        if kind is _BYTE:
            out.append(pid)
            out.append(value)
        elif kind is _U16:
            out.append(pid)
            out += U16.pack(value)
        elif kind is _U32:
            out.append(pid)
            out += U32.pack(value)
        elif kind is _VARINT:
            for item in value:
                out.append(pid)
                out += encode_varint(item)
        elif kind is _STRING:
            out.append(pid)
            out += encode_string(value)
        elif kind is _BINARY:
            out.append(pid)
            out += encode_binary(value)
        else:
            for key, text in value:
                out.append(pid)
                out += encode_string(key)
                out += encode_string(text)
    return encode_varint(len(out)) + out


__all__ = ["decode_properties", "encode_properties"]
