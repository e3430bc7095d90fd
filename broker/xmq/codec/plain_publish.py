"""Fast recognition of a read that holds exactly one plain PUBLISH.

A device publishing telemetry sends one QoS 0 or QoS 1 PUBLISH per read, with a topic name, no
retain flag and (MQTT 5) no properties. Recognising that shape with a few index operations
skips the general ``PacketReader`` (a packet list, a ``Publish`` object, the dispatch by type).
Anything else — another packet after it, a partial packet, retain, QoS 2, properties, an empty
topic (topic alias), a malformed field, a packet over the size limit — returns None and goes
through the full decoder, which gives malformed input its reason code.
"""

from __future__ import annotations

from typing import Final

from xmq.codec.errors import MalformedPacket
from xmq.codec.wire import read_varint

PlainPublish = tuple[str, int, int, bytes, bytes, bytes]
"""(topic, QoS, packet id (0 for QoS 0), payload, head, tail): ``head`` and ``tail`` are the
packet around its packet id with DUP cleared — the same message as any client of the same
protocol version receives it at this QoS without retain (see ``encode_publish_parts``)."""

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


def plain_publish(data: bytes, version: int, max_packet_size: int) -> PlainPublish | None:
    """The fields of ``data`` when it is exactly one plain PUBLISH (see module doc), else None."""
    first = data[0]
    if first in (_QOS1, _QOS1_DUP):
        qos = 1
    elif first == _QOS0:
        qos = 0
    else:
        return None
    size = len(data)
    if size > max_packet_size or size < 5:
        return None
    length = data[1]
    if length < 0x80:
        pos = 2
    else:
        try:
            length, pos = read_varint(data, 1, size)
        except MalformedPacket:
            return None
        if not pos:
            return None
    if pos + length != size:
        return None
    topic_end = pos + 2 + ((data[pos] << 8) | data[pos + 1])
    if topic_end == pos + 2:
        return None  # empty topic: a topic alias (or a protocol error)
    packet_id = 0
    if qos:
        if topic_end + 2 > size:
            return None
        packet_id = (data[topic_end] << 8) | data[topic_end + 1]
        if not packet_id:
            return None
        body = topic_end + 2
    else:
        body = topic_end
    if version == 5:
        if body >= size or data[body]:
            return None  # properties (or none at all): the full decoder decides
        body += 1
    elif body > size:
        return None
    raw = data[pos + 2 : topic_end]
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
    if qos:
        head = data[:topic_end] if first == _QOS1 else bytes((_QOS1,)) + data[1:topic_end]
        return topic, 1, packet_id, data[body:], head, data[topic_end + 2 :]
    return topic, 0, 0, data[body:], data[:topic_end], data[topic_end:]
