"""The node-link wire format: length-prefixed binary frames.

Every frame is ``u32 length | u8 kind | body`` (length counts kind + body). Strings are
``u16 length | UTF-8``. Messages travel as ``xmq.contract.message_record`` records whose id
is the message's cluster-wide forward id (``<node>/<epoch>/f<n>``; empty from nodes before it
was introduced, which receivers accept: their records then get ids of their own).
"""

from __future__ import annotations

import enum
import struct
from typing import Final

from xmq.codec.byte_values import BYTE, u16
from xmq.codec.properties import Properties
from xmq.codec.property_codec import encode_properties
from xmq.contract.message_record import RECORD_FORMAT, RecordError

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
MAX_FRAME: Final = 64 * 1024 * 1024


class FrameError(ValueError):
    """A peer sent bytes that are not a frame."""


class Kind(enum.IntEnum):
    HELLO = 1  # node id, u64 epoch, optional u8 features
    ROUTE = 2  # u8 added, filter
    SHARE = 3  # u8 added, group, filter
    DSUB = 4  # u8 added, client id, key, filter, u8 qos, u8 flags [, u64 since]
    DGONE = 5  # client id
    PUBLISH = 6  # record
    SHARED = 7  # u32 sequence, group, filter, record
    DIRECT = 8  # client id, record
    TAKEOVER = 9  # u32 request, client id, u64 expected epoch
    TAKEOVER_DONE = 10  # u32 request, u8 ok
    SHARED_ACK = 11  # u32 count, u32 sequence each: those SHARED frames were acknowledged
    PUBLISH_ACK = 12  # u64 count [, (u64 frame, u8 reason) ...]: see publish_ack
    RESUME = 13  # u64 count: counted frames of the peer's run handled here (FEATURE_RESUME)
    PING = 14  # empty: the sender is alive (FEATURE_HEARTBEAT, once a second)
    SNAPSHOT_END = 15  # empty: the sender's route snapshot is complete (FEATURE_SNAPSHOT_END)
    RETAINED_WRITTEN = 16  # topic, forward id, u64 revision (0: not stored): see retained_written
    PUBLISH_UNKEPT = 17  # record: a PUBLISH the sender does not keep (FEATURE_UNKEPT_PUBLISH)


# The per-message kinds as plain int constants (equal to their ``Kind``; a unit test holds
# them to it): the compiled build compares an ``int`` with one of these natively, with a
# ``Kind`` member through a generic rich comparison.
PUBLISH: Final = 6
PUBLISH_ACK: Final = 12
PUBLISH_UNKEPT: Final = 17


def _str(value: str) -> bytes:
    data = value.encode()
    return _U16.pack(len(data)) + data


def frame(kind: int, *parts: bytes) -> bytes:
    body = parts[0] if len(parts) == 1 else b"".join(parts)
    return _head(kind, len(body)) + body


def _head(kind: int, size: int) -> bytes:
    """``u32 length | u8 kind`` of a frame whose body is ``size`` bytes."""
    return ((size + 1) << 8 | kind).to_bytes(5, "big")


FEATURE_SHARED_COUNTED = 1
"""HELLO feature bit: this node counts SHARED frames with PUBLISH and DIRECT frames for
PUBLISH_ACK, both ways. Used on a link only when both peers set it (older nodes send no
feature byte and ignore ours), so the two counts always agree."""


FEATURE_RESUME = 2
"""HELLO feature bit: a link to this node that drops while both nodes hold their leases is
dialled again and resumed: right after HELLO each side sends RESUME with how many counted
frames (PUBLISH, DIRECT, SHARED) of the other's run it has handled, over all links to that
run; the other sends again, in order, the ones it kept and the peer never handled, and holds
every new counted frame until that RESUME has come. Both ends must set it."""

FEATURE_HEARTBEAT = 4
"""HELLO feature bit: this node sends PING once a second and closes a link it has heard
nothing on for ``HEARTBEAT_TIMEOUT_S`` (used when both ends set it)."""

FEATURE_SNAPSHOT_END = 8
"""HELLO feature bit: this node ends the route snapshot it sends after HELLO with SNAPSHOT_END
(used when both ends set it). On a resumed link the receiver then drops the sender's routes,
shared groups and persistent subscriptions the snapshot did not name: they were removed while
the link was down, and their removal deltas went nowhere."""

FEATURE_RETAINED_WRITTEN = 16
"""HELLO feature bit: this node sends RETAINED_WRITTEN for each retained change it forwarded,
once Redis has answered its write, and reads those of its peers (used when both ends set it)."""

FEATURE_UNKEPT_PUBLISH = 32
"""HELLO feature bit: this node sends a PUBLISH frame it does not keep (the receiver has no
persistent session the sender knows of, so no held ack waits for it and nothing is sent again)
as PUBLISH_UNKEPT, and reads those of its peers (a node sends them only to a peer that set
it: an older node reads no kind it does not know). The receiver
handles and counts it as a PUBLISH (its number is in RESUME and in the next PUBLISH_ACK), but
owes no PUBLISH_ACK for it: a stream of them crosses with no confirmation coming back. A kept
frame (PUBLISH, DIRECT, SHARED) still asks for one, which confirms every frame before it."""

FEATURE_SHARED_DURABLE = 64
"""HELLO feature bit: this node reads DSUB frames for its peers' persistent sessions' shared
subscriptions (key ``$share/<group>/<filter>``, filter the group's topic filter): the sender
announces them to it (only: an older node would take one for a non-shared subscription).
When the sender dies they are ``RouteTable.shared_orphans``."""

FEATURES = (
    FEATURE_SHARED_COUNTED
    | FEATURE_RESUME
    | FEATURE_HEARTBEAT
    | FEATURE_SNAPSHOT_END
    | FEATURE_RETAINED_WRITTEN
    | FEATURE_SHARED_DURABLE
    | FEATURE_UNKEPT_PUBLISH
)


def hello(node_id: str, epoch: int, features: int = FEATURES) -> bytes:
    return frame(Kind.HELLO, _str(node_id), _U64.pack(epoch), bytes((features,)))


def resume(count: int) -> bytes:
    return frame(Kind.RESUME, _U64.pack(count))


PING_FRAME = frame(Kind.PING, b"")
SNAPSHOT_END_FRAME = frame(Kind.SNAPSHOT_END, b"")


def route(added: bool, topic_filter: str) -> bytes:
    return frame(Kind.ROUTE, bytes((added,)), _str(topic_filter))


def share(added: bool, group: str, topic_filter: str) -> bytes:
    return frame(Kind.SHARE, bytes((added,)), _str(group), _str(topic_filter))


def durable_sub(
    added: bool,
    client_id: str,
    key: str,
    topic_filter: str,
    qos: int,
    flags: int,
    since: int = -1,
) -> bytes:
    """``since`` (appended when known; older receivers ignore it): the number of the last
    forward id the sender had given when the session was announced there — a PUBLISH frame
    of the sender numbered higher was routed with the session subscribed there."""
    return frame(
        Kind.DSUB,
        bytes((added,)),
        _str(client_id),
        _str(key),
        _str(topic_filter),
        bytes((qos, flags)),
        _U64.pack(since) if since >= 0 else b"",
    )


def durable_gone(client_id: str) -> bytes:
    return frame(Kind.DGONE, _str(client_id))


def publish(record: bytes, kept: bool = True) -> bytes:
    """A PUBLISH frame; ``kept`` False: a PUBLISH_UNKEPT one (to a peer that reads them)."""
    kind = PUBLISH if kept else PUBLISH_UNKEPT
    size = len(record) + 1
    if size < 256:  # (the common record: one allocation, no ``int.to_bytes``)
        return b"\x00\x00\x00%b%b%b" % (BYTE[size], BYTE[kind], record)
    return _head(kind, len(record)) + record


_RECORD_FORMAT_BYTE: Final = BYTE[RECORD_FORMAT]
_PUBLISH_PACKET: Final = 3  # (the MQTT packet type whose properties a record holds)
_LENGTH: Final[list[bytes]] = [size.to_bytes(4, "big") for size in range(256)]
# a frame's kind, the record's format, flags and QoS byte: [unkept << 6 | flags << 2 | qos]
_HEADS: Final[list[bytes]] = [
    bytes((PUBLISH_UNKEPT if index >> 6 else PUBLISH, RECORD_FORMAT, index >> 2 & 15, index & 3))
    for index in range(128)
]
_NO_ORIGIN: Final = b"\x00\x00"
_FIELDS_KEPT: Final = 4096  # (cleared whole past it: a lookup and an insertion then)
_FIELD_KEPT_MAX: Final = 255  # (longer texts are encoded each time: the cache stays small)
_TEXT_FIELDS: Final[dict[str, bytes]] = {}


def text_field(text: str) -> bytes:
    """``u16 length | UTF-8`` of a record's topic or origin: kept per text (a topic and a
    publisher's id recur on every forward), made each time for one longer than 255 bytes."""
    field = _TEXT_FIELDS.get(text)
    if field is not None:
        return field
    data = text.encode()
    if len(data) > 0xFFFF:
        raise RecordError("record field too long")
    field = u16(len(data)) + data
    if len(data) <= _FIELD_KEPT_MAX:
        if len(_TEXT_FIELDS) >= _FIELDS_KEPT:
            _TEXT_FIELDS.clear()
        _TEXT_FIELDS[text] = field
    return field


def publish_record(
    kept: bool,
    record_id: bytes,
    topic: str,
    payload: bytes,
    qos: int,
    retain: bool,
    properties: Properties | None,
    origin: str | None,
    delivery_qos: int,
    delivery_retain: bool,
) -> bytes:
    """``publish(encode_record(...), kept)`` built as one ``bytes`` (no record object made
    and copied again behind the frame's head): the forward's frame. ``record_id``: the
    forward id, encoded. A unit test holds it to ``publish`` of ``encode_record``.
    The head's four bytes come from a table, the topic and origin fields from
    ``text_field``."""
    org = text_field(origin) if origin else _NO_ORIGIN
    top = text_field(topic)
    if len(record_id) > 255:
        raise RecordError("record field too long")
    flags = delivery_qos | (4 if delivery_retain else 0) | (8 if retain else 0)
    if 0 <= qos <= 3 and 0 <= flags <= 15:
        head = _HEADS[(0 if kept else 64) | flags << 2 | qos]
    else:  # (not a message's: the record's bytes all the same)
        head = bytes((PUBLISH if kept else PUBLISH_UNKEPT, RECORD_FORMAT, flags & 0xFF, qos & 0xFF))
    # the head (4), the id's length and the id, the origin and topic fields, no ids (1)
    if properties is None:  # (the ids' count and a zero property length: two literal bytes)
        size = 7 + len(record_id) + len(org) + len(top) + len(payload)
        length = _LENGTH[size] if size < 256 else size.to_bytes(4, "big")
        return b"%b%b%b%b%b%b\x00\x00%b" % (
            length, head, BYTE[len(record_id)], record_id, org, top, payload
        )  # fmt: skip
    props = encode_properties(properties, _PUBLISH_PACKET)
    size = 6 + len(record_id) + len(org) + len(top) + len(props) + len(payload)
    # the frame's u32 length: from a table up to 255 (the common forward), no ``int.to_bytes``
    length = _LENGTH[size] if size < 256 else size.to_bytes(4, "big")
    return b"%b%b%b%b%b%b\x00%b%b" % (
        length, head, BYTE[len(record_id)], record_id, org, top, props, payload
    )  # fmt: skip


def with_kind(data: bytes, kept: bool) -> bytes:
    """A PUBLISH / PUBLISH_UNKEPT frame ``data`` as the other kind when ``kept`` says so."""
    kind = PUBLISH if kept else PUBLISH_UNKEPT
    if data[4] == kind:
        return data
    return data[:4] + BYTE[kind] + data[5:]


def retained_written(topic: str, forward_id: str, revision: int) -> bytes:
    """The sender's retained change of ``topic`` (PUBLISH ``forward_id``, sent before) was
    written to Redis with ``revision`` (0: not stored). Its receivers re-read a topic changed on
    two nodes at once once every change they applied is announced (``store.retained_convergence``).
    """
    return frame(Kind.RETAINED_WRITTEN, _str(topic), _str(forward_id), _U64.pack(revision))


def shared(sequence: int, group: str, topic_filter: str, record: bytes) -> bytes:
    return frame(Kind.SHARED, _U32.pack(sequence), _str(group), _str(topic_filter), record)


def publish_ack(count: int, undelivered: list[tuple[int, int]] | None = None) -> bytes:
    """The first ``count`` counted frames are in the receiver's records; ``undelivered``:
    (frame number, MQTT reason code) of those among them delivered nowhere there, every
    delivery dropped for a quota (0x97), so the sender's held ack can say so. Older nodes
    read the count only."""
    if not undelivered:
        return _PUBLISH_ACK_HEAD + count.to_bytes(8, "big")
    reasons = b"".join(_U64.pack(number) + bytes((reason,)) for number, reason in undelivered)
    return frame(Kind.PUBLISH_ACK, _U64.pack(count), reasons)


_PUBLISH_ACK_HEAD: Final = (9 << 8 | PUBLISH_ACK).to_bytes(5, "big")


def read_publish_ack(reader: BodyReader) -> tuple[int, dict[int, int] | None]:
    """The count and the reasons by frame number (None when there are none) of a PUBLISH_ACK."""
    count = reader.u64()
    if reader.pos >= len(reader.buf):
        return count, None
    reasons: dict[int, int] = {}
    while reader.pos < len(reader.buf):
        number = reader.u64()
        reasons[number] = reader.u8()
    return count, reasons


def shared_ack(sequences: list[int]) -> bytes:
    return frame(Kind.SHARED_ACK, _U32.pack(len(sequences)), b"".join(map(_U32.pack, sequences)))


def direct(client_id: str, record: bytes) -> bytes:
    return frame(Kind.DIRECT, _str(client_id), record)


def takeover(request: int, client_id: str, epoch: int, ends_session: bool = False) -> bytes:
    """``ends_session``: the new connection starts clean, so the session ends with the
    hand-over and a delayed will still pending goes out (a trailing byte: a node of the version
    before reads no further than the epoch)."""
    return frame(
        Kind.TAKEOVER, _U32.pack(request), _str(client_id), _U64.pack(epoch), bytes((ends_session,))
    )


def takeover_done(request: int, ok: bool) -> bytes:
    return frame(Kind.TAKEOVER_DONE, _U32.pack(request), bytes((ok,)))


class BodyReader:
    """Reads the fields of one frame body in order."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def u8(self) -> int:
        if self.pos >= len(self.buf):
            raise FrameError("truncated frame")
        value = self.buf[self.pos]
        self.pos += 1
        return value

    def u32(self) -> int:
        return self._unsigned(4)

    def u64(self) -> int:
        return self._unsigned(8)

    def _unsigned(self, size: int) -> int:
        """A big-endian unsigned integer of ``size`` bytes (read as typed ints, which the
        compiled build keeps native, not through ``struct``)."""
        buf = self.buf
        pos = self.pos
        end = pos + size
        if end > len(buf):
            raise FrameError("truncated frame")
        value = 0
        while pos < end:
            value = value << 8 | buf[pos]
            pos += 1
        self.pos = end
        return value

    def text(self) -> str:
        buf = self.buf
        start = self.pos + 2
        if start > len(buf):
            raise FrameError("truncated frame")
        end = start + (buf[start - 2] << 8 | buf[start - 1])
        if end > len(buf):
            raise FrameError("truncated string")
        self.pos = end
        return buf[start:end].decode()

    def rest(self) -> bytes:
        data = self.buf[self.pos :]
        self.pos = len(self.buf)
        return data


class FrameDecoder:
    """Splits a byte stream into ``(kind, body)`` frames."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes | bytearray) -> list[tuple[int, bytes]]:
        buffer = self._buffer
        if not buffer and type(data) is bytes:
            return self._feed_whole(data)
        buffer += data
        frames: list[tuple[int, bytes]] = []
        pos = 0
        end = len(buffer)
        while end - pos >= 5:
            size = (
                buffer[pos] << 24 | buffer[pos + 1] << 16 | buffer[pos + 2] << 8 | buffer[pos + 3]
            )
            if size < 1 or size > MAX_FRAME:
                raise FrameError(f"bad frame length {size}")
            if end - pos - 4 < size:
                break
            frames.append((buffer[pos + 4], bytes(buffer[pos + 5 : pos + 4 + size])))
            pos += 4 + size
        if pos:
            del buffer[:pos]
        return frames

    def _feed_whole(self, data: bytes) -> list[tuple[int, bytes]]:
        """``feed`` with nothing buffered (the common read: whole frames): the frames are cut
        from ``data`` itself; only an incomplete frame at its end is buffered."""
        frames: list[tuple[int, bytes]] = []
        pos = 0
        end = len(data)
        while end - pos >= 5:
            size = data[pos] << 24 | data[pos + 1] << 16 | data[pos + 2] << 8 | data[pos + 3]
            if size < 1 or size > MAX_FRAME:
                raise FrameError(f"bad frame length {size}")
            stop = pos + 4 + size
            if stop > end:
                break
            frames.append((data[pos + 4], data[pos + 5 : stop]))
            pos = stop
        if pos < end:
            self._buffer += data[pos:]
        return frames
