"""Encode packet records to bytes for MQTT 3.1, 3.1.1 and 5.0.

Fields the target version has no wire format for are left out (3.1.x: properties, reason
codes on acknowledgements), and so are properties the packet type may not carry. For 3.1.x the
CONNACK and SUBACK codes may be given as MQTT 5 reason codes (>= 0x80): they are mapped with
``connack_v311_code`` / ``suback_v311_code``; 3.1.1 codes pass through unchanged. A PUBLISH
can be encoded once with :func:`encode_publish_parts` and the packet id patched in per
subscriber.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

from xmq.codec.byte_values import u16
from xmq.codec.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    PacketIdAck,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)
from xmq.codec.properties import WILL_PROPERTIES, Properties
from xmq.codec.property_codec import encode_properties
from xmq.codec.reason_codes import connack_v311_code, suback_v311_code
from xmq.codec.wire import U16, encode_binary, encode_string, encode_varint

PINGREQ_BYTES = b"\xc0\x00"
PINGRESP_BYTES = b"\xd0\x00"
#: DISCONNECT with no reason code (3.1.x, or MQTT 5 normal disconnection).
DISCONNECT_BYTES = b"\xe0\x00"
#: Bit of the first byte of a PUBLISH that marks a re-delivery.
PUBLISH_DUP_FLAG = 0x08

_SHORT_PUBLISH_HEAD = struct.Struct("!BBH")


def _frame(first_byte: int, body: bytes | bytearray) -> bytes:
    return bytes((first_byte,)) + encode_varint(len(body)) + body


def encode_publish_parts(
    topic: str,
    payload: bytes,
    qos: int,
    retain: bool,
    properties: Properties | None,
    protocol_version: int,
) -> tuple[bytes, bytes]:
    """Encode a PUBLISH split around its packet id.

    The packet is ``head + packet_id.to_bytes(2, "big") + tail`` when ``qos > 0`` and
    ``head + tail`` when ``qos == 0``; set ``PUBLISH_DUP_FLAG`` in ``head[0]`` for a re-send.
    """
    topic_bytes = topic.encode()
    topic_size = len(topic_bytes)
    if topic_size > 0xFFFF:
        raise ValueError("topic longer than 65535 bytes")
    if protocol_version == 5:
        tail = (encode_properties(properties, 3) if properties is not None else b"\x00") + payload
    else:
        tail = payload
    remaining = 2 + topic_size + len(tail) + (2 if qos else 0)
    first = 0x30 | (qos << 1) | (1 if retain else 0)
    if remaining < 128:
        head = _SHORT_PUBLISH_HEAD.pack(first, remaining, topic_size) + topic_bytes
    else:
        head = b"".join(
            (bytes((first,)), encode_varint(remaining), U16.pack(topic_size), topic_bytes)
        )
    return head, tail


def _publish(packet: Publish, version: int) -> bytes:
    head, tail = encode_publish_parts(
        packet.topic, packet.payload, packet.qos, packet.retain, packet.properties, version
    )
    if packet.dup:
        head = bytes((head[0] | PUBLISH_DUP_FLAG,)) + head[1:]
    if packet.qos:
        return head + U16.pack(packet.packet_id) + tail
    return head + tail


def _connect(packet: Connect, version: int) -> bytes:
    level = packet.protocol_version
    name = packet.protocol_name
    if level == 3 and name == "MQTT":
        name = "MQIsdp"
    will = packet.will
    flags = 0x02 if packet.clean_start else 0
    if will is not None:
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
    if packet.username is not None:
        flags |= 0x80
    if packet.password is not None:
        flags |= 0x40
    body = bytearray(encode_string(name))
    body.append(level)
    body.append(flags)
    body += U16.pack(packet.keep_alive)
    if level == 5:
        body += encode_properties(packet.properties, 1)
    body += encode_string(packet.client_id)
    if will is not None:
        if level == 5:
            body += encode_properties(will.properties, WILL_PROPERTIES)
        body += encode_string(will.topic)
        body += encode_binary(will.payload)
    if packet.username is not None:
        body += encode_string(packet.username)
    if packet.password is not None:
        body += encode_binary(packet.password)
    return _frame(0x10, body)


def _connack(packet: Connack, version: int) -> bytes:
    flags = 1 if packet.session_present else 0
    reason = packet.reason_code
    if version != 5:
        if reason >= 0x80:
            reason = connack_v311_code(reason)
        return bytes((0x20, 2, flags, reason))
    return _frame(0x20, bytes((flags, reason)) + encode_properties(packet.properties, 2))


def _ack(packet: PacketIdAck, version: int) -> bytes:
    first = 0x62 if packet.packet_type == 6 else packet.packet_type << 4
    if version != 5 or packet.properties is None:
        return _id_ack(first, packet.packet_id, packet.reason_code, version)
    props = encode_properties(packet.properties, packet.packet_type)
    body = U16.pack(packet.packet_id) + bytes((packet.reason_code,)) + props
    return _frame(first, body)


_PUBACK_FIRST: Final = 0x40
_PUBREC_FIRST: Final = 0x50
_PUBREL_FIRST: Final = 0x62
_PUBCOMP_FIRST: Final = 0x70
_PUBACK_HEAD: Final = b"\x40\x02"
_PUBREC_HEAD: Final = b"\x50\x02"
_PUBREL_HEAD: Final = b"\x62\x02"
_PUBCOMP_HEAD: Final = b"\x70\x02"
"""The fixed header of a success acknowledgement (remaining length 2: the packet id only):
compiled, ``head + u16(packet_id)`` is a concatenation of two bytes, where
``bytes((first, 2, hi, lo))`` built a tuple and called ``bytes`` on it (~1,200 instructions
per PUBACK against ~350)."""


def _id_ack(first: int, packet_id: int, reason: int, version: int) -> bytes:
    """A PUBACK / PUBREC / PUBREL / PUBCOMP without properties: the reason code only when it
    is not success and the peer speaks MQTT 5 (3.1.x has no reason codes on these)."""
    if reason and version == 5:
        return bytes((first, 3, packet_id >> 8, packet_id & 0xFF, reason))
    return bytes((first, 2, packet_id >> 8, packet_id & 0xFF))


_PUBACKS: Final[list[bytes]] = [b""] * 0x10000
"""``_PUBACKS[n]``: the success PUBACK for packet id ``n`` (the same four bytes for 3.1.1 and
5), made the first time it is asked for: a list index rather than a concatenation (~460
instructions a PUBACK against ~60; 512 KiB of pointers, and 40 bytes an id once used)."""


def puback_bytes(packet_id: int, reason: int, version: int) -> bytes:
    """A PUBACK (QoS 1 acknowledgement) for a peer speaking ``version``."""
    if reason and version == 5:
        return _id_ack(_PUBACK_FIRST, packet_id, reason, version)
    if 0 <= packet_id <= 0xFFFF:
        packet = _PUBACKS[packet_id]
        if packet:
            return packet
    packet = _PUBACK_HEAD + u16(packet_id)  # (ValueError beyond two bytes)
    _PUBACKS[packet_id] = packet
    return packet


def pubrec_bytes(packet_id: int, reason: int, version: int) -> bytes:
    """A PUBREC (QoS 2, publish received) for a peer speaking ``version``."""
    if reason and version == 5:
        return _id_ack(_PUBREC_FIRST, packet_id, reason, version)
    return _PUBREC_HEAD + u16(packet_id)


def pubrel_bytes(packet_id: int, reason: int, version: int) -> bytes:
    """A PUBREL (QoS 2, publish released; fixed-header flags 0010) for ``version``."""
    if reason and version == 5:
        return _id_ack(_PUBREL_FIRST, packet_id, reason, version)
    return _PUBREL_HEAD + u16(packet_id)


def pubcomp_bytes(packet_id: int, reason: int, version: int) -> bytes:
    """A PUBCOMP (QoS 2, publish complete) for a peer speaking ``version``."""
    if reason and version == 5:
        return _id_ack(_PUBCOMP_FIRST, packet_id, reason, version)
    return _PUBCOMP_HEAD + u16(packet_id)


def _subscribe(packet: Subscribe, version: int) -> bytes:
    body = bytearray(U16.pack(packet.packet_id))
    if version == 5:
        body += encode_properties(packet.properties, 8)
    for sub in packet.subscriptions:
        body += encode_string(sub.topic_filter)
        if version == 5:
            body.append(
                sub.qos
                | (0x04 if sub.no_local else 0)
                | (0x08 if sub.retain_as_published else 0)
                | (sub.retain_handling << 4)
            )
        else:
            body.append(sub.qos)
    return _frame(0x82, body)


def _suback(packet: Suback, version: int) -> bytes:
    body = bytearray(U16.pack(packet.packet_id))
    if version == 5:
        body += encode_properties(packet.properties, 9)
        body += bytes(packet.reason_codes)
    else:
        body += bytes(suback_v311_code(code) for code in packet.reason_codes)
    return _frame(0x90, body)


def suback_bytes(packet_id: int, reason_codes: list[int], version: int) -> bytes:
    """A SUBACK without properties (the common case), as ``encode(Suback(...))`` writes it."""
    count = len(reason_codes)
    if version == 5:
        if count > 100:
            return _suback(Suback(packet_id, reason_codes), version)
        return bytes((0x90, 3 + count, packet_id >> 8, packet_id & 0xFF, 0, *reason_codes))
    if count > 120:
        return _suback(Suback(packet_id, reason_codes), version)
    codes = [suback_v311_code(code) for code in reason_codes]
    return bytes((0x90, 2 + count, packet_id >> 8, packet_id & 0xFF, *codes))


def _unsubscribe(packet: Unsubscribe, version: int) -> bytes:
    body = bytearray(U16.pack(packet.packet_id))
    if version == 5:
        body += encode_properties(packet.properties, 10)
    for topic_filter in packet.topic_filters:
        body += encode_string(topic_filter)
    return _frame(0xA2, body)


def _unsuback(packet: Unsuback, version: int) -> bytes:
    if version != 5:
        return b"\xb0\x02" + U16.pack(packet.packet_id)
    body = U16.pack(packet.packet_id) + encode_properties(packet.properties, 11)
    return _frame(0xB0, body + bytes(packet.reason_codes))


def _pingreq(packet: Pingreq, version: int) -> bytes:
    return PINGREQ_BYTES


def _pingresp(packet: Pingresp, version: int) -> bytes:
    return PINGRESP_BYTES


def _reason_packet(first: int, reason: int, props: Properties | None) -> bytes:
    """DISCONNECT or AUTH (v5): shortest form that carries the reason and properties."""
    if props is None:
        return bytes((first, 1, reason)) if reason else bytes((first, 0))
    return _frame(first, bytes((reason,)) + encode_properties(props, first >> 4))


def _disconnect(packet: Disconnect, version: int) -> bytes:
    if version != 5:
        return DISCONNECT_BYTES
    return _reason_packet(0xE0, packet.reason_code, packet.properties)


def _auth(packet: Auth, version: int) -> bytes:
    if version != 5:
        raise ValueError("AUTH exists only in MQTT 5")
    return _reason_packet(0xF0, packet.reason_code, packet.properties)


_ENCODERS: dict[type[Any], Callable[[Any, int], bytes]] = {
    Connect: _connect,
    Connack: _connack,
    Publish: _publish,
    Puback: _ack,
    Pubrec: _ack,
    Pubrel: _ack,
    Pubcomp: _ack,
    Subscribe: _subscribe,
    Suback: _suback,
    Unsubscribe: _unsubscribe,
    Unsuback: _unsuback,
    Pingreq: _pingreq,
    Pingresp: _pingresp,
    Disconnect: _disconnect,
    Auth: _auth,
}


def encode(packet: Packet, protocol_version: int) -> bytes:
    """Encode ``packet`` for a peer speaking ``protocol_version`` (3, 4 or 5).

    A CONNECT is encoded by its own ``protocol_version`` field. Raises ValueError for values
    that cannot be encoded (strings over 65535 bytes, AUTH below MQTT 5...).
    """
    return _ENCODERS[type(packet)](packet, protocol_version)


__all__ = [
    "DISCONNECT_BYTES",
    "PINGREQ_BYTES",
    "PINGRESP_BYTES",
    "PUBLISH_DUP_FLAG",
    "encode",
    "encode_publish_parts",
    "encode_varint",
    "puback_bytes",
    "pubcomp_bytes",
    "pubrec_bytes",
    "pubrel_bytes",
    "suback_bytes",
]
