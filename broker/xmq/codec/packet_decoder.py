"""Decode one MQTT control packet body into a packet record.

``decode_body(first_byte, buf, pos, end, protocol_version)`` reads ``buf[pos:end]``, where
``buf`` is ``bytes`` (the reader passes the whole receive chunk and offsets, so nothing is
copied except the fields kept). Only :class:`ProtocolError` subclasses escape.
``protocol_version`` 5 selects MQTT 5 rules; anything below 5 (including 0, "unknown")
selects MQTT 3.1.1 rules. CONNECT carries its own version.
"""

from __future__ import annotations

from collections.abc import Callable

from xmq.codec.connect_decoder import decode_connack, decode_connect
from xmq.codec.errors import LOW_LEVEL_ERRORS, MalformedPacket, ProtocolViolation
from xmq.codec.packets import (
    Auth,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    SubscriptionRequest,
    Unsuback,
    Unsubscribe,
)
from xmq.codec.properties import Properties
from xmq.codec.property_codec import decode_properties
from xmq.codec.reason_codes import (
    AUTH_REASONS,
    DISCONNECT_REASONS,
    PUBACK_REASONS,
    PUBREL_REASONS,
    SUBACK_REASONS,
    SUBACK_V311_REASONS,
    UNSUBACK_REASONS,
)
from xmq.codec.wire import Buffer, end_of, read_string, read_u16

#: Required low nibble of the first byte per packet type (PUBLISH, index 3, is checked apart).
FIXED_HEADER_FLAGS: tuple[int, ...] = (-1, 0, 0, -1, 0, 0, 2, 0, 2, 0, 2, 0, 0, 0, 0, 0)


def _packet_id(buf: Buffer, pos: int, end: int) -> int:
    packet_id = read_u16(buf, pos, end)
    if not packet_id:
        raise MalformedPacket("packet identifier must not be 0")
    return packet_id


def decode_publish(flags: int, buf: Buffer, pos: int, end: int, version: int) -> Publish:
    """PUBLISH body in ``buf[pos:end]``; ``flags`` is the low nibble of the first byte.

    May raise UnicodeDecodeError for a bad topic: callers convert (``decode_body`` does).
    """
    qos = (flags >> 1) & 3
    if qos == 3:
        raise MalformedPacket("PUBLISH with QoS 3")
    if pos + 2 > end:
        raise MalformedPacket("truncated PUBLISH topic")
    stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
    if stop > end:
        raise MalformedPacket("PUBLISH topic runs past the packet")
    topic = buf[pos + 2 : stop].decode()
    if "\x00" in topic:
        raise MalformedPacket("topic contains U+0000")
    pos = stop
    packet_id = 0
    if qos:
        if pos + 2 > end:
            raise MalformedPacket("truncated PUBLISH packet identifier")
        packet_id = (buf[pos] << 8) | buf[pos + 1]
        if not packet_id:
            raise MalformedPacket("packet identifier must not be 0")
        pos += 2
    elif flags & 0x08:
        raise MalformedPacket("DUP set on a QoS 0 PUBLISH")
    props = None
    if version == 5:
        if pos < end and not buf[pos]:
            pos += 1
        else:
            props, pos = decode_properties(buf, pos, end, 3)
    return Publish(topic, buf[pos:end], qos, (flags & 1) != 0, (flags & 8) != 0, packet_id, props)


def _ack_fields(
    buf: Buffer, pos: int, end: int, version: int, ptype: int, reasons: frozenset[int]
) -> tuple[int, int, Properties | None]:
    packet_id = _packet_id(buf, pos, end)
    pos += 2
    if pos == end:
        return packet_id, 0, None
    if version != 5:
        raise MalformedPacket("acknowledgement longer than 2 bytes")
    reason = buf[pos]
    if reason not in reasons:
        raise MalformedPacket(f"invalid reason code 0x{reason:02x} for packet type {ptype}")
    props = None
    if pos + 1 < end:
        props, pos = decode_properties(buf, pos + 1, end, ptype)
        end_of("acknowledgement", pos, end)
    return packet_id, reason, props


def _puback(buf: Buffer, pos: int, end: int, version: int) -> Puback:
    return Puback(*_ack_fields(buf, pos, end, version, 4, PUBACK_REASONS))


def _pubrec(buf: Buffer, pos: int, end: int, version: int) -> Pubrec:
    return Pubrec(*_ack_fields(buf, pos, end, version, 5, PUBACK_REASONS))


def _pubrel(buf: Buffer, pos: int, end: int, version: int) -> Pubrel:
    return Pubrel(*_ack_fields(buf, pos, end, version, 6, PUBREL_REASONS))


def _pubcomp(buf: Buffer, pos: int, end: int, version: int) -> Pubcomp:
    return Pubcomp(*_ack_fields(buf, pos, end, version, 7, PUBREL_REASONS))


def _subscribe(buf: Buffer, pos: int, end: int, version: int) -> Subscribe:
    packet_id = _packet_id(buf, pos, end)
    pos += 2
    props = None
    if version == 5:
        props, pos = decode_properties(buf, pos, end, 8)
    subscriptions: list[SubscriptionRequest] = []
    while pos < end:
        topic_filter, pos = read_string(buf, pos, end)
        if pos >= end:
            raise MalformedPacket("missing subscription options")
        options = buf[pos]
        pos += 1
        qos = options & 3
        if version == 5:
            if options & 0xC0:
                raise MalformedPacket("subscription options reserved bits set")
            if qos == 3:
                raise ProtocolViolation("subscription QoS 3")
            retain_handling = (options >> 4) & 3
            if retain_handling == 3:
                raise ProtocolViolation("retain handling 3")
            subscriptions.append(
                SubscriptionRequest(
                    topic_filter, qos, bool(options & 4), bool(options & 8), retain_handling
                )
            )
        else:
            if options & 0xFC or qos == 3:
                raise MalformedPacket("invalid requested QoS byte")
            subscriptions.append(SubscriptionRequest(topic_filter, qos))
    if not subscriptions:
        raise ProtocolViolation("SUBSCRIBE without topic filters")
    return Subscribe(packet_id, subscriptions, props)


def _codes(buf: Buffer, pos: int, end: int, reasons: frozenset[int], name: str) -> list[int]:
    codes = list(buf[pos:end])
    if not codes:
        raise ProtocolViolation(f"{name} without reason codes")
    for code in codes:
        if code not in reasons:
            raise MalformedPacket(f"invalid {name} reason code 0x{code:02x}")
    return codes


def _suback(buf: Buffer, pos: int, end: int, version: int) -> Suback:
    packet_id = _packet_id(buf, pos, end)
    pos += 2
    if version == 5:
        props, pos = decode_properties(buf, pos, end, 9)
        return Suback(packet_id, _codes(buf, pos, end, SUBACK_REASONS, "SUBACK"), props)
    return Suback(packet_id, _codes(buf, pos, end, SUBACK_V311_REASONS, "SUBACK"))


def _unsubscribe(buf: Buffer, pos: int, end: int, version: int) -> Unsubscribe:
    packet_id = _packet_id(buf, pos, end)
    pos += 2
    props = None
    if version == 5:
        props, pos = decode_properties(buf, pos, end, 10)
    filters: list[str] = []
    while pos < end:
        topic_filter, pos = read_string(buf, pos, end)
        filters.append(topic_filter)
    if not filters:
        raise ProtocolViolation("UNSUBSCRIBE without topic filters")
    return Unsubscribe(packet_id, filters, props)


def _unsuback(buf: Buffer, pos: int, end: int, version: int) -> Unsuback:
    packet_id = _packet_id(buf, pos, end)
    pos += 2
    if version == 5:
        props, pos = decode_properties(buf, pos, end, 11)
        return Unsuback(packet_id, _codes(buf, pos, end, UNSUBACK_REASONS, "UNSUBACK"), props)
    end_of("UNSUBACK", pos, end)
    return Unsuback(packet_id, [])


def _pingreq(buf: Buffer, pos: int, end: int, version: int) -> Pingreq:
    end_of("PINGREQ", pos, end)
    return Pingreq()


def _pingresp(buf: Buffer, pos: int, end: int, version: int) -> Pingresp:
    end_of("PINGRESP", pos, end)
    return Pingresp()


def _reason_and_properties(
    buf: Buffer, pos: int, end: int, ptype: int, reasons: frozenset[int], name: str
) -> tuple[int, Properties | None]:
    if pos == end:
        return 0, None
    reason = buf[pos]
    if reason not in reasons:
        raise MalformedPacket(f"invalid {name} reason code 0x{reason:02x}")
    props = None
    if pos + 1 < end:
        props, pos = decode_properties(buf, pos + 1, end, ptype)
        end_of(name, pos, end)
    return reason, props


def _disconnect(buf: Buffer, pos: int, end: int, version: int) -> Disconnect:
    if version != 5:
        end_of("DISCONNECT", pos, end)
        return Disconnect()
    return Disconnect(*_reason_and_properties(buf, pos, end, 14, DISCONNECT_REASONS, "DISCONNECT"))


def _auth(buf: Buffer, pos: int, end: int, version: int) -> Auth:
    if version != 5:
        raise MalformedPacket("AUTH exists only in MQTT 5")
    return Auth(*_reason_and_properties(buf, pos, end, 15, AUTH_REASONS, "AUTH"))


def _reserved(buf: Buffer, pos: int, end: int, version: int) -> Packet:
    raise MalformedPacket("reserved packet type 0")


_DECODERS: tuple[Callable[[Buffer, int, int, int], Packet], ...] = (
    _reserved,
    decode_connect,
    decode_connack,
    _reserved,  # PUBLISH is decoded by decode_body directly
    _puback,
    _pubrec,
    _pubrel,
    _pubcomp,
    _subscribe,
    _suback,
    _unsubscribe,
    _unsuback,
    _pingreq,
    _pingresp,
    _disconnect,
    _auth,
)


def decode_body(first_byte: int, buf: Buffer, pos: int, end: int, protocol_version: int) -> Packet:
    """Decode the packet whose fixed header byte is ``first_byte`` from ``buf[pos:end]``."""
    ptype = first_byte >> 4
    try:
        if ptype == 3:
            return decode_publish(first_byte & 0x0F, buf, pos, end, protocol_version)
        if first_byte & 0x0F != FIXED_HEADER_FLAGS[ptype]:
            raise MalformedPacket(f"invalid fixed header flags 0x{first_byte:02x}")
        return _DECODERS[ptype](buf, pos, end, protocol_version)
    except LOW_LEVEL_ERRORS as exc:
        raise MalformedPacket(f"packet type {ptype}: {exc}") from exc


def decode_packet(
    first_byte: int, body: memoryview | bytes | bytearray, protocol_version: int
) -> Packet:
    """Decode one packet from its fixed-header byte and its complete body."""
    data = body if type(body) is bytes else bytes(body)
    return decode_body(first_byte, data, 0, len(data), protocol_version)


__all__ = [
    "FIXED_HEADER_FLAGS",
    "decode_body",
    "decode_packet",
    "decode_publish",
]
