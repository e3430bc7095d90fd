"""Fast recognition of a read that holds exactly one plain PUBLISH.

A device publishing telemetry sends one QoS 0 or QoS 1 PUBLISH per read, with a topic name, no
retain flag and (MQTT 5) no properties. Recognising that shape with a few index operations
skips the general ``PacketReader`` (a packet list, a ``Publish`` object, the dispatch by type).
Anything else — another packet after it, a partial packet, retain, QoS 2, properties, an empty
topic (topic alias), a malformed field, a packet over the size limit — returns False and goes
through the full decoder, which gives malformed input its reason code.

The fields are set on the connection's ``PlainRead``, not returned in a tuple (a tuple of six,
two of its items boxed, made, unpacked and freed at each read) — and that object keeps the
last read's topic, so a device publishing to one topic again finds it there.
"""

from __future__ import annotations

from typing import Final

from xmq.codec.errors import MalformedPacket
from xmq.codec.wire import read_varint

_QOS0: Final = 0x30
_QOS1: Final = 0x32
_QOS1_DUP: Final = 0x3A
"""``Final``: compiled, a literal in the code; a plain module global was a lookup in the
module's dict at each read (three a PUBLISH)."""

TOPICS_KEPT: Final = 4096
"""Topic names kept decoded (``_TOPICS``) before the table is emptied and filled again."""
TOPIC_KEPT_BYTES: Final = 128
"""The longest topic name (in bytes) kept decoded; a longer one is decoded at each read."""
_TOPICS: Final[dict[bytes, str]] = {}
"""A topic name's UTF-8 bytes -> the ``str`` decoded from them, for the topics read lately: a
device publishes to the same few topics again and again. Found here (the bytes hashed and
looked up, ~450 instructions: more than the decoding it saves, ~200 with the check for
U+0000), the ``str`` is the same object each time, with its hash cached, so the routing's
lookups by topic (``core.publish_flow``) do not hash a new ``str`` nor free it: ~330 less
there, ~300 less a point-to-point message in all (docs/benchmarks.md, session 17, p2p21).
Bounded: at ``TOPICS_KEPT`` names it is emptied (a client publishing to ever new topics costs
a clear per ``TOPICS_KEPT`` of them), and a name over ``TOPIC_KEPT_BYTES`` is not kept, so the
table holds ~1.6 MB with ASCII names of that length, ~3.3 MB at most. Only names decoded
without error and without U+0000 are kept (the others go to the full decoder, as before)."""


class PlainRead:
    """One connection's plain PUBLISH reads (``read_plain`` fills it; the adapter makes one
    for a connection at its first plain PUBLISH, so an idle or subscribing connection holds
    none): the fields of the last one read, taken by the caller at once, and that read's
    ``head`` and ``topic``, which stay: a device publishing to one topic with payloads of one
    size sends the same ``head`` (the fixed header and the topic name) again and again, and a
    ``head`` equal to the last one's names the same topic, so its ``str`` is taken from here
    with one comparison of bytes — no slice of the name, no hash of it, no lookup in
    ``_TOPICS`` (~500 instructions a point-to-point PUBLISH: docs/benchmarks.md, session 18,
    p2p22)."""

    __slots__ = ("head", "packet_id", "payload", "qos", "tail", "topic")

    def __init__(self) -> None:
        self.head = b""  # (never a packet's: a head is 4 bytes at least)
        """The packet before its packet id, with DUP cleared: with ``tail`` (the packet after
        it), the same message as any client of the same protocol version receives it at this
        QoS without retain (see ``encode_publish_parts``)."""
        self.topic = ""
        """The topic name ``head`` holds."""
        self.qos = 0
        self.packet_id = 0  # 0 for QoS 0
        self.payload = b""
        self.tail = b""


def read_plain(data: bytes, version: int, max_packet_size: int, into: PlainRead) -> bool:
    """True, with ``into``'s fields set, when ``data`` is exactly one plain PUBLISH (see the
    module doc); False (``into`` unchanged) otherwise."""
    first = data[0]
    if first in (_QOS1, _QOS1_DUP):
        qos = 1
    elif first == _QOS0:
        qos = 0
    else:
        return False
    size = len(data)
    if size > max_packet_size or size < 5:
        return False
    length = data[1]
    if length < 0x80:
        pos = 2
    else:
        try:
            length, pos = read_varint(data, 1, size)
        except MalformedPacket:
            return False
        if not pos:
            return False
    if pos + length != size:
        return False
    topic_end = pos + 2 + ((data[pos] << 8) | data[pos + 1])
    if topic_end == pos + 2:
        return False  # empty topic: a topic alias (or a protocol error)
    packet_id = 0
    if qos:
        if topic_end + 2 > size:
            return False
        packet_id = (data[topic_end] << 8) | data[topic_end + 1]
        if not packet_id:
            return False
        after_id = topic_end + 2
    else:
        after_id = topic_end
    body = after_id
    if version == 5:
        if body >= size or data[body]:
            return False  # properties (or none at all): the full decoder decides
        body += 1
    elif body > size:
        return False
    head = data[:topic_end] if first != _QOS1_DUP else bytes((_QOS1,)) + data[1:topic_end]
    if head == into.head:  # the last read's topic (the same name's bytes)
        topic = into.topic
    else:
        found = _topic(data, pos + 2, topic_end)
        if found is None:
            return False
        topic = found
        into.head = head
        into.topic = topic
    tail = data[after_id:]
    into.qos = qos
    into.packet_id = packet_id
    into.payload = tail if body == after_id else data[body:]  # (3.1.1: the same bytes)
    into.tail = tail
    return True


def _topic(data: bytes, start: int, end: int) -> str | None:
    """The topic name ``data[start:end]`` decoded (kept in ``_TOPICS``), or None when it is
    not UTF-8 or holds U+0000 (the full decoder answers those)."""
    raw = data[start:end]
    topic = _TOPICS.get(raw)
    if topic is None:
        try:
            topic = raw.decode()
        except UnicodeDecodeError:
            return None
        if "\x00" in topic:
            return None
        if len(raw) <= TOPIC_KEPT_BYTES:
            if len(_TOPICS) >= TOPICS_KEPT:
                _TOPICS.clear()
            _TOPICS[raw] = topic
    return topic
