"""The binary form of a message queued for a persistent session, and of a forwarded publish.

One record is one element of ``session:queue:<client id>`` (see :mod:`xmq.contract.keys`), and
the body of a message crossing a node link. Layout (big-endian)::

    u8 format (1) | u8 flags | u8 message qos
    u8 id length | id                (unique per record: "<node id>/<epoch>/<counter>")
    u16 origin length | origin       (publishing client id, for No Local)
    u16 topic length | topic
    u8 subscription id count | u32 each
    MQTT 5 PUBLISH properties (varint length + list)
    payload                           (the rest)

``flags``: bits 0-1 the QoS of the delivery, bit 2 its retain flag, bit 3 the message's own
retain flag. The id makes every record distinct, so ``LREM queue 1 <record>`` removes exactly
the acknowledged one. A forwarded message's id is ``<node id>/<epoch>/f<counter>``, given by the
node that first sent it over a link (the body of PUBLISH / DIRECT / SHARED frames); a node
receiving it uses that id for its non-shared records of the message (one per session), which
is what lets ``APPEND_IF_OWNER`` recognise a replayed copy. Other records use the recording
node's own ``<node id>/<epoch>/<counter>``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from xmq.codec.byte_values import BYTE, u16
from xmq.codec.errors import ProtocolError
from xmq.codec.properties import Properties
from xmq.codec.property_codec import decode_properties, encode_properties

RECORD_FORMAT: Final = 1
_FORMAT_BYTE: Final = bytes((RECORD_FORMAT,))
_U32: Final = struct.Struct(">I")  # (subscription ids: rare; the hot fields are read and
# written as typed ints, which the compiled build keeps native: a ``struct`` call returns
# untyped objects, and every sum and comparison on them is then a generic one)
_PUBLISH: Final = 3
_HEADS: Final = tuple(
    bytes((RECORD_FORMAT, flags, qos)) for flags in range(16) for qos in range(4)
)  # the first three bytes (format, flags, message QoS) for each flags < 16 and QoS < 4
_ORIGINS: Final[dict[str, bytes]] = {}
"""Publishing client id -> its record field (``u16`` length and the id): a client's records
make no ``bytes`` of its id each (kept for ``_ORIGINS_MAX`` ids at most)."""
_ORIGINS_MAX: Final = 4096


class RecordError(ValueError):
    """Bytes that are not a message record."""


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """A decoded record: the message plus how it is owed to one session."""

    record_id: str
    topic: str
    payload: bytes
    qos: int
    retain: bool
    delivery_qos: int
    delivery_retain: bool
    origin: str | None
    properties: Properties | None
    subscription_ids: tuple[int, ...]


def encode_record(
    record_id: str | bytes,
    topic: str,
    payload: bytes,
    qos: int,
    retain: bool,
    properties: Properties | None,
    origin: str | None,
    delivery_qos: int,
    delivery_retain: bool,
    subscription_ids: tuple[int, ...] = (),
) -> bytes:
    """Encode one record (see the module docstring for the layout); ``record_id`` as a ``str``
    or already UTF-8 (``RunIds.next_raw``)."""
    flags = delivery_qos | (4 if delivery_retain else 0) | (8 if retain else 0)
    rid = record_id.encode() if isinstance(record_id, str) else record_id
    top = topic.encode()
    if len(rid) > 255 or len(top) > 0xFFFF or len(subscription_ids) > 255:
        raise RecordError("record field too long")
    org = _origin_field(origin) if origin else b"\x00\x00"
    if subscription_ids:
        ids = bytes((len(subscription_ids),)) + b"".join(map(_U32.pack, subscription_ids))
    else:
        ids = b"\x00"
    props = encode_properties(properties, _PUBLISH) if properties is not None else b"\x00"
    if 0 <= flags < 16 and 0 <= qos < 4:
        head = _HEADS[flags << 2 | qos]
    else:
        head = _FORMAT_BYTE + BYTE[flags & 0xFF] + BYTE[qos & 0xFF]
    # (a literal format: the compiled build joins the parts in one allocation; the one-byte
    # fields and lengths come from tables, not ``int.to_bytes``: ``codec.byte_values``)
    return b"%b%b%b%b%b%b%b%b%b" % (
        head,
        BYTE[len(rid)],
        rid,
        org,
        u16(len(top)),
        top,
        ids,
        props,
        payload,
    )


def _origin_field(origin: str) -> bytes:
    """The record's origin field: ``u16`` length and the client id (kept per id)."""
    field = _ORIGINS.get(origin)
    if field is None:
        org = origin.encode()
        if len(org) > 0xFFFF:
            raise RecordError("record field too long")
        if len(_ORIGINS) >= _ORIGINS_MAX:
            _ORIGINS.clear()
        field = _ORIGINS[origin] = u16(len(org)) + org
    return field


RecordFields = tuple[str, str, bytes, int, int, str, Properties | None, tuple[int, ...], int, int]
"""A record's fields as :func:`decode_fields` returns them: record id, topic, payload, message
QoS, flags byte, origin (``''`` for none), properties, subscription ids, and two offsets into
the record: of its ``u16 topic length`` and of its properties field (``payload`` follows the
properties). An MQTT 5 PUBLISH of the message without properties is the topic field as it
stands and ``record[properties offset:]`` (a zero byte, then the payload) behind a fixed
header."""


def decode_fields(buf: bytes) -> RecordFields:
    """Decode a record into plain fields, without building a :class:`MessageRecord` (the link
    path); raises :class:`RecordError` when the bytes are not one."""
    end = len(buf)
    try:
        fmt, flags, qos, rid_len = buf[0], buf[1], buf[2], buf[3]
        if fmt != RECORD_FORMAT:
            raise RecordError(f"unknown record format {fmt}")
        pos = 4 + rid_len
        record_id = buf[4:pos].decode()
        org_len = (buf[pos] << 8) | buf[pos + 1]
        start = pos + 2
        pos = start + org_len
        origin = buf[start:pos].decode()
        topic_at = pos
        start = pos + 2
        pos = start + ((buf[pos] << 8) | buf[pos + 1])
        if pos > end:
            raise RecordError("record runs past its end")
        topic = buf[start:pos].decode()
        count = buf[pos]
        pos += 1
        ids: tuple[int, ...] = ()
        if count:
            ids = tuple(_U32.unpack_from(buf, pos + 4 * n)[0] for n in range(count))
            pos += 4 * count
        props_at = pos
        props, pos = decode_properties(buf, pos, end, _PUBLISH)
    except (struct.error, IndexError, UnicodeDecodeError, ProtocolError) as error:
        raise RecordError(f"truncated or malformed record: {error}") from error
    if pos > end:
        raise RecordError("record runs past its end")
    return (record_id, topic, buf[pos:], qos, flags, origin, props, ids, topic_at, props_at)


def decode_record(data: bytes | memoryview) -> MessageRecord:
    """Decode a record; raises :class:`RecordError` when the bytes are not one."""
    record_id, topic, payload, qos, flags, origin, props, ids, _, _ = decode_fields(bytes(data))
    return MessageRecord(
        record_id,
        topic,
        payload,
        qos,
        bool(flags & 8),
        flags & 3,
        bool(flags & 4),
        origin or None,
        props,
        ids,
    )
