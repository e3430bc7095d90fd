"""Hand-encoded MQTT packets for the load client, and a minimal frame splitter.

The load client needs only a handful of packets (CONNECT, SUBSCRIBE, PUBLISH, PUBACK, PINGREQ,
DISCONNECT out; CONNACK, SUBACK, PUBLISH, PUBACK, PINGRESP, DISCONNECT in), so it encodes them by
hand instead of importing the broker's codec: the bench is a client and must stay independent of
the code it measures. MQTT 5.0 (protocol level 5) and 3.1.1 (level 4) are both supported.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MQTT_V311 = 4
MQTT_V5 = 5

CONNECT = 1
CONNACK = 2
PUBLISH = 3
PUBACK = 4
SUBSCRIBE = 8
SUBACK = 9
PINGREQ = 12
PINGRESP = 13
DISCONNECT = 14

PAYLOAD = struct.Struct("<QII")
"""The 16-byte benchmark payload: send time (ns, monotonic clock), sequence, publisher id."""

PAYLOAD_SIZE = PAYLOAD.size

PINGREQ_PACKET = b"\xc0\x00"
DISCONNECT_PACKET = b"\xe0\x00"
DISCONNECT_EXPIRE_SESSION_PACKET = b"\xe0\x07\x00\x05\x11\x00\x00\x00\x00"
"""MQTT 5 DISCONNECT, normal, with Session Expiry Interval 0: the broker drops the session."""

_PROP_SESSION_EXPIRY = 0x11
_PROP_RECEIVE_MAXIMUM = 0x21
_PROP_TOPIC_ALIAS_MAXIMUM = 0x22
_PROP_MAXIMUM_PACKET_SIZE = 0x27


class MalformedPacketError(ValueError):
    """The bytes read from the broker are not a well-formed MQTT frame."""


def encode_varint(value: int) -> bytes:
    """MQTT variable byte integer (1 to 4 bytes)."""
    if not 0 <= value <= 268_435_455:
        raise ValueError(f"varint out of range: {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_varint(data: bytes | bytearray | memoryview, pos: int) -> tuple[int, int] | None:
    """Decode a varint at ``pos``: ``(value, next_pos)``, or None when more bytes are needed."""
    value = 0
    shift = 0
    for count in range(4):
        if pos + count >= len(data):
            return None
        byte = data[pos + count]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if count and byte == 0:
                raise MalformedPacketError("non-minimal variable byte integer")
            return value, pos + count + 1
        shift += 7
    raise MalformedPacketError("variable byte integer longer than 4 bytes")


def encode_string(text: str) -> bytes:
    raw = text.encode()
    if len(raw) > 0xFFFF:
        raise ValueError("string too long for MQTT")
    return len(raw).to_bytes(2, "big") + raw


def _frame(first_byte: int, body: bytes) -> bytes:
    return bytes((first_byte,)) + encode_varint(len(body)) + body


def encode_connect(
    client_id: str,
    *,
    protocol: int = MQTT_V5,
    keepalive: int = 300,
    clean_start: bool = True,
    session_expiry: int = 0,
    receive_maximum: int = 65535,
    username: str | None = None,
    password: bytes | None = None,
) -> bytes:
    """CONNECT. MQTT 5 adds Session Expiry (when non-zero) and Receive Maximum properties."""
    if protocol not in (MQTT_V311, MQTT_V5):
        raise ValueError(f"unsupported protocol level {protocol}")
    flags = 0x02 if clean_start else 0x00
    if username is not None:
        flags |= 0x80
    if password is not None:
        flags |= 0x40
    body = bytearray(encode_string("MQTT"))
    body.append(protocol)
    body.append(flags)
    body += keepalive.to_bytes(2, "big")
    if protocol == MQTT_V5:
        props = bytearray()
        if session_expiry:
            props.append(_PROP_SESSION_EXPIRY)
            props += session_expiry.to_bytes(4, "big")
        if receive_maximum != 65535:
            props.append(_PROP_RECEIVE_MAXIMUM)
            props += receive_maximum.to_bytes(2, "big")
        body += encode_varint(len(props)) + props
    body += encode_string(client_id)
    if username is not None:
        body += encode_string(username)
    if password is not None:
        body += len(password).to_bytes(2, "big") + password
    return _frame(CONNECT << 4, bytes(body))


def encode_subscribe(
    packet_id: int, filters: list[str], *, qos: int = 1, protocol: int = MQTT_V5
) -> bytes:
    """SUBSCRIBE for every filter at one QoS (MQTT 5: no properties, default options)."""
    if not filters:
        raise ValueError("SUBSCRIBE needs at least one filter")
    body = bytearray(packet_id.to_bytes(2, "big"))
    if protocol == MQTT_V5:
        body.append(0)
    for topic_filter in filters:
        body += encode_string(topic_filter)
        body.append(qos)
    return _frame((SUBSCRIBE << 4) | 0x02, bytes(body))


class PublishTemplate:
    """PUBLISH for one topic at one QoS, encoded once; each message fills in id and payload."""

    __slots__ = ("_head", "_props", "qos")

    def __init__(self, topic: str, *, qos: int = 1, protocol: int = MQTT_V5) -> None:
        if qos not in (0, 1, 2):
            raise ValueError("the load client publishes at QoS 0, 1 or 2")
        topic_bytes = encode_string(topic)
        props = b"\x00" if protocol == MQTT_V5 else b""
        remaining = len(topic_bytes) + (2 if qos else 0) + len(props) + PAYLOAD_SIZE
        self._head = bytes(((PUBLISH << 4) | (qos << 1),)) + encode_varint(remaining) + topic_bytes
        self._props = props
        self.qos = qos

    def encode(self, packet_id: int, sent_ns: int, seq: int, publisher_id: int) -> bytes:
        payload = PAYLOAD.pack(sent_ns, seq, publisher_id)
        if self.qos:
            return self._head + packet_id.to_bytes(2, "big") + self._props + payload
        return self._head + self._props + payload


def encode_publish(
    topic: str,
    packet_id: int,
    sent_ns: int,
    seq: int,
    publisher_id: int,
    *,
    qos: int = 1,
    protocol: int = MQTT_V5,
) -> bytes:
    return PublishTemplate(topic, qos=qos, protocol=protocol).encode(
        packet_id, sent_ns, seq, publisher_id
    )


def encode_puback(packet_id: int) -> bytes:
    """PUBACK with success: the same two-byte form for 3.1.1 and 5 (reason code omitted)."""
    return b"\x40\x02" + packet_id.to_bytes(2, "big")


@dataclass(frozen=True, slots=True)
class Frame:
    """One complete MQTT frame: first byte and body (after the remaining length)."""

    first_byte: int
    body: bytes

    @property
    def packet_type(self) -> int:
        return self.first_byte >> 4


class FrameSplitter:
    """Accumulates bytes and yields complete frames (control path; the hot path is inline)."""

    __slots__ = ("_buffer", "max_size")

    def __init__(self, max_size: int = 1 << 20) -> None:
        self._buffer = bytearray()
        self.max_size = max_size

    def feed(self, data: bytes) -> list[Frame]:
        buffer = self._buffer
        buffer += data
        frames: list[Frame] = []
        pos = 0
        while len(buffer) - pos >= 2:
            decoded = decode_varint(buffer, pos + 1)
            if decoded is None:
                break
            length, start = decoded
            if length > self.max_size:
                raise MalformedPacketError(f"frame of {length} bytes exceeds {self.max_size}")
            end = start + length
            if end > len(buffer):
                break
            frames.append(Frame(buffer[pos], bytes(buffer[start:end])))
            pos = end
        del buffer[:pos]
        return frames

    @property
    def pending(self) -> int:
        return len(self._buffer)


@dataclass(frozen=True, slots=True)
class Connack:
    session_present: bool
    reason_code: int
    receive_maximum: int = 65535
    maximum_packet_size: int = 0
    assigned_client_id: str | None = None


def _decode_properties(body: bytes, pos: int) -> tuple[dict[int, int | bytes], int]:
    """The few CONNACK properties the client cares about; others are skipped by their width."""
    decoded = decode_varint(body, pos)
    if decoded is None:
        raise MalformedPacketError("truncated property length")
    length, pos = decoded
    end = pos + length
    if end > len(body):
        raise MalformedPacketError("property length beyond the packet")
    props: dict[int, int | bytes] = {}
    widths = {0x01: 1, 0x02: 4, 0x11: 4, 0x13: 2, 0x17: 1, 0x18: 4, 0x19: 1, 0x21: 2}
    widths |= {0x22: 2, 0x23: 2, 0x24: 1, 0x25: 1, 0x27: 4, 0x28: 1, 0x29: 1, 0x2A: 1}
    while pos < end:
        ident = body[pos]
        pos += 1
        if ident in widths:
            width = widths[ident]
            props[ident] = int.from_bytes(body[pos : pos + width], "big")
            pos += width
        elif ident == 0x0B:
            sub = decode_varint(body, pos)
            if sub is None:
                raise MalformedPacketError("truncated subscription identifier")
            props[ident], pos = sub
        elif ident == 0x26:
            for _ in range(2):
                size = int.from_bytes(body[pos : pos + 2], "big")
                pos += 2 + size
        elif ident in (0x03, 0x08, 0x09, 0x12, 0x15, 0x16, 0x1A, 0x1C, 0x1F):
            size = int.from_bytes(body[pos : pos + 2], "big")
            props[ident] = bytes(body[pos + 2 : pos + 2 + size])
            pos += 2 + size
        else:
            raise MalformedPacketError(f"unknown property 0x{ident:02x}")
    if pos != end:
        raise MalformedPacketError("property overruns its length")
    return props, end


def decode_connack(frame: Frame, protocol: int = MQTT_V5) -> Connack:
    if frame.packet_type != CONNACK or len(frame.body) < 2:
        raise MalformedPacketError("not a CONNACK")
    session_present = bool(frame.body[0] & 0x01)
    reason = frame.body[1]
    if protocol != MQTT_V5 or len(frame.body) == 2:
        return Connack(session_present, reason)
    props, _ = _decode_properties(frame.body, 2)
    receive_max = props.get(_PROP_RECEIVE_MAXIMUM, 65535)
    max_packet = props.get(_PROP_MAXIMUM_PACKET_SIZE, 0)
    assigned = props.get(0x12)
    return Connack(
        session_present,
        reason,
        receive_maximum=int(receive_max) if isinstance(receive_max, int) else 65535,
        maximum_packet_size=int(max_packet) if isinstance(max_packet, int) else 0,
        assigned_client_id=assigned.decode() if isinstance(assigned, bytes) else None,
    )


def decode_suback(frame: Frame, protocol: int = MQTT_V5) -> tuple[int, list[int]]:
    """SUBACK: ``(packet_id, reason codes)``."""
    if frame.packet_type != SUBACK or len(frame.body) < 3:
        raise MalformedPacketError("not a SUBACK")
    packet_id = int.from_bytes(frame.body[:2], "big")
    pos = 2
    if protocol == MQTT_V5:
        _, pos = _decode_properties(frame.body, pos)
    return packet_id, list(frame.body[pos:])


@dataclass(frozen=True, slots=True)
class PublishView:
    topic: str
    qos: int
    packet_id: int
    payload: bytes


def decode_publish(frame: Frame, protocol: int = MQTT_V5) -> PublishView:
    if frame.packet_type != PUBLISH:
        raise MalformedPacketError("not a PUBLISH")
    body = frame.body
    qos = (frame.first_byte >> 1) & 0x03
    topic_len = int.from_bytes(body[:2], "big")
    pos = 2 + topic_len
    topic = body[2:pos].decode()
    packet_id = 0
    if qos:
        packet_id = int.from_bytes(body[pos : pos + 2], "big")
        pos += 2
    if protocol == MQTT_V5:
        decoded = decode_varint(body, pos)
        if decoded is None:
            raise MalformedPacketError("truncated PUBLISH properties")
        length, pos = decoded
        pos += length
    return PublishView(topic, qos, packet_id, bytes(body[pos:]))
