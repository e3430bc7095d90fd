"""Decode the bodies of CONNECT and CONNACK: the protocol name and level, the connect flags,
the will, the credentials (``decode_connect``), and the CONNACK's flags and reason
(``decode_connack``).

Apart from ``codec.packet_decoder``, which dispatches to them by packet type: the packets of a
connection's start, not of its messages. Compiled (``xmq.native_build``) like the decoder, so
that ``Connect`` (compiled, ``codec.connect_packet``) is built through a C call.
"""

from __future__ import annotations

from xmq.codec.errors import (
    LOW_LEVEL_ERRORS,
    MalformedPacket,
    ProtocolError,
    ProtocolViolation,
    UnsupportedProtocolVersion,
)
from xmq.codec.packets import Connack, Connect, Will
from xmq.codec.properties import WILL_PROPERTIES
from xmq.codec.property_codec import decode_properties
from xmq.codec.reason_codes import CONNACK_REASONS
from xmq.codec.wire import Buffer, end_of, read_binary, read_string


def decode_connect(buf: Buffer, pos: int, end: int, version: int) -> Connect:
    """CONNECT body in ``buf[pos:end]`` (``version`` unused: CONNECT carries its own level).
    A ``ProtocolError`` raised once the level is read carries it (for the CONNACK's format)."""
    name, pos = read_string(buf, pos, end)
    if pos >= end:
        raise MalformedPacket("truncated CONNECT protocol level")
    level = buf[pos]
    if name == "MQTT":
        supported = level in (4, 5)
    elif name == "MQIsdp":
        supported = level == 3
    else:
        raise UnsupportedProtocolVersion(
            f"unknown protocol name {name!r}", protocol_version=level, protocol_name=name
        )
    if not supported:
        raise UnsupportedProtocolVersion(
            f"unsupported protocol level {level} for {name!r}",
            protocol_version=level,
            protocol_name=name,
        )
    try:
        return _connect_fields(buf, pos + 1, end, name, level)
    except ProtocolError as exc:
        if not exc.protocol_version:
            exc.protocol_version = level
        raise
    except LOW_LEVEL_ERRORS as low:  # (own name: mypyc types it by the first clause)
        raise MalformedPacket(f"CONNECT: {low}", protocol_version=level) from low


def _connect_fields(buf: Buffer, pos: int, end: int, name: str, level: int) -> Connect:
    if pos + 3 > end:
        raise MalformedPacket("truncated CONNECT variable header")
    flags = buf[pos]
    keep_alive = (buf[pos + 1] << 8) | buf[pos + 2]
    pos += 3
    if flags & 0x01:
        raise MalformedPacket("CONNECT reserved flag set")
    has_will = flags & 0x04
    will_qos = (flags >> 3) & 3
    will_retain = bool(flags & 0x20)
    if has_will:
        if will_qos == 3:
            raise MalformedPacket("will QoS 3")
    elif will_qos or will_retain:
        raise MalformedPacket("will QoS/retain set without the will flag")
    has_username = flags & 0x80
    has_password = flags & 0x40
    if has_password and not has_username and level < 5:
        raise MalformedPacket("password without user name")
    props = None
    if level == 5:
        props, pos = decode_properties(buf, pos, end, 1)
        if (
            props is not None
            and props.authentication_data is not None
            and props.authentication_method is None
        ):
            raise ProtocolViolation("authentication data without authentication method")
    client_id, pos = read_string(buf, pos, end)
    will = None
    if has_will:
        will_props = None
        if level == 5:
            will_props, pos = decode_properties(buf, pos, end, WILL_PROPERTIES)
        will_topic, pos = read_string(buf, pos, end)
        will_payload, pos = read_binary(buf, pos, end)
        will = Will(will_topic, will_payload, will_qos, will_retain, will_props)
    username = None
    password = None
    if has_username:
        username, pos = read_string(buf, pos, end)
    if has_password:
        password, pos = read_binary(buf, pos, end)
    end_of("CONNECT", pos, end)
    return Connect(
        name, level, bool(flags & 0x02), keep_alive, client_id, props, will, username, password
    )


def decode_connack(buf: Buffer, pos: int, end: int, version: int) -> Connack:
    """CONNACK body in ``buf[pos:end]`` (the bench's clients and the tests read it)."""
    if pos + 2 > end:
        raise MalformedPacket("truncated CONNACK")
    ack_flags = buf[pos]
    reason = buf[pos + 1]
    pos += 2
    if ack_flags & 0xFE:
        raise MalformedPacket("CONNACK reserved flags set")
    props = None
    if version == 5:
        if reason not in CONNACK_REASONS:
            raise MalformedPacket(f"invalid CONNACK reason code 0x{reason:02x}")
        if pos < end:
            props, pos = decode_properties(buf, pos, end, 2)
    end_of("CONNACK", pos, end)
    return Connack(bool(ack_flags & 1), reason, props)


__all__ = ["decode_connack", "decode_connect"]
