"""Frames from a linked peer (after HELLO), and our PUBLISH_ACK confirmations to it.

PUBLISH, DIRECT and SHARED frames are counted per link in arrival order; after the store has
flushed every record they caused, one PUBLISH_ACK tells the sender how many of them are
recorded here (a SHARED one: in its member's record, or handed to the member), so it can
release its copies and its publishers' held acknowledgements. A PUBLISH_UNKEPT frame (a
PUBLISH the sender did not keep: ``link_frames.FEATURE_UNKEPT_PUBLISH``) is counted the same
way but owes no PUBLISH_ACK: the next one owed covers it.

A PUBLISH frame matching more than ``fanout_slices.SLICE`` local sessions is routed a slice
per loop turn like a client's (``core.fanout_slices``): it is counted as handled when it
arrives (a RESUME covers it: a link resumed meanwhile is not sent it again) and confirmed only
after its last slice, so the PUBLISH_ACK that covers it (with its quota outcome) follows every
slice's records — on the link that holds the peer's counts by then (``PeerLink.fan_in``,
``PeerLink.inherit``) — and the link handles none of its later frames meanwhile.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Final

from xmq.cluster import link_frames as frames
from xmq.cluster.direct_hold import POLL_S
from xmq.cluster.link_frames import BodyReader, Kind
from xmq.cluster.route_table import DurableSub, group_of
from xmq.codec.byte_values import BYTE
from xmq.codec.reason_codes import ReasonCode
from xmq.codec.writer import encode_varint
from xmq.contract.message_record import RECORD_FORMAT, decode_fields
from xmq.core.cluster_ports import NO_DURABLE_CONTEXT, DurableContext
from xmq.core.message import Message

if TYPE_CHECKING:
    from xmq.cluster.cluster_hub import ClusterHub
    from xmq.cluster.peer_link import PeerLink
    from xmq.core.fanout_slices import Fanout

Decoded = tuple[Message, int, bool, tuple[int, ...]]
"""message, delivery QoS, delivery retain flag, subscription identifiers"""


_MQTT_5: Final = 5
_WIRE_HEADS: Final[list[bytes]] = [
    bytes((0x30 | index >> 7 << 1, index & 0x7F)) for index in range(3 << 7)
]
"""``[qos << 7 | remaining]``: an MQTT PUBLISH's first two bytes (QoS 0-2, no flags)."""


def decode_message(hub: ClusterHub, record_bytes: bytes) -> Decoded:
    """The message of a record from a peer. Without properties, the record already holds an
    MQTT 5 PUBLISH of it (topic field, then a zero property length and the payload): the
    message is seeded with that wire variant, as a client's plain PUBLISH seeds its own, so
    MQTT 5 subscribers at the message's QoS get those bytes without an encoding.

    The common record (no subscription identifiers, no properties, QoS 0-2) is read here by
    its offsets (``_plain``); any other, and any record whose fields run past its end, by
    ``decode_fields`` (which raises ``RecordError`` for those). (A dict of the topics and
    origins seen, keyed by their bytes, costs more than their decoding: ~450 instructions a
    look-up, the slice's hash made each time.)"""
    end = len(record_bytes)
    if end >= 10 and record_bytes[0] == RECORD_FORMAT and record_bytes[2] <= 2:
        origin_at = 4 + record_bytes[3]
        if origin_at + 2 <= end:
            topic_at = origin_at + 2 + (record_bytes[origin_at] << 8 | record_bytes[origin_at + 1])
            if topic_at + 2 <= end:
                ids_at = topic_at + 2 + (record_bytes[topic_at] << 8 | record_bytes[topic_at + 1])
                if ids_at + 2 <= end and not record_bytes[ids_at] and not record_bytes[ids_at + 1]:
                    return _plain(record_bytes, origin_at, topic_at, ids_at)
    return _decoded(hub, record_bytes)


def _plain(record_bytes: bytes, origin_at: int, topic_at: int, ids_at: int) -> Decoded:
    """``decode_message`` of a record without identifiers and properties, at QoS 0-2."""
    qos = record_bytes[2]
    flags = record_bytes[1]
    record_id = record_bytes[4:origin_at].decode()  # the sender's id (empty: an old sender)
    origin = record_bytes[origin_at + 2 : topic_at].decode()
    topic = record_bytes[topic_at + 2 : ids_at].decode()
    topic_field = record_bytes[topic_at:ids_at]
    tail = record_bytes[ids_at + 1 :]  # the zero property length, the payload
    remaining = len(topic_field) + len(tail) + (2 if qos else 0)
    if remaining < 0x80:  # the PUBLISH's first byte and its one-byte remaining length
        head = _WIRE_HEADS[qos << 7 | remaining] + topic_field
    else:
        head = bytes((0x30 | qos << 1,)) + encode_varint(remaining) + topic_field
    message = Message(
        topic, record_bytes[ids_at + 2 :], qos, bool(flags & 8), None, origin or None, 0.0,
        (head, tail), _MQTT_5, record_id,
    )  # fmt: skip
    return message, flags & 3, bool(flags & 4), ()


def _decoded(hub: ClusterHub, record_bytes: bytes) -> Decoded:
    """``decode_message`` of any record, through ``decode_fields``."""
    record_id, topic, payload, qos, flags, origin, props, ids, topic_at, props_at = decode_fields(
        record_bytes
    )
    if props is None:
        wire = None
        if not ids and qos <= 2:  # ids sit between the topic and the properties
            tail = record_bytes[props_at:]
            topic_field = record_bytes[topic_at : props_at - 1]
            remaining = len(topic_field) + len(tail) + (2 if qos else 0)
            first = 0x30 | qos << 1
            if remaining < 0x80:
                head = b"%b%b%b" % (BYTE[first], BYTE[remaining], topic_field)
            else:
                head = bytes((first,)) + encode_varint(remaining) + topic_field
            wire = (head, tail)
        message = Message(
            topic, payload, qos, bool(flags & 8), None, origin or None, 0.0, wire, _MQTT_5,
            record_id,  # the sender's id for it (empty: an old sender)
        )  # fmt: skip
    else:
        message = Message(
            topic, payload, qos, bool(flags & 8), props, origin or None, hub.broker.now(),
            None, 0, record_id,
        )  # fmt: skip
    return message, flags & 3, bool(flags & 4), ids


def handle_frame(hub: ClusterHub, link: PeerLink, kind: int, body: bytes) -> None:
    node = link.peer_node
    table = hub.table
    if kind == frames.PUBLISH or kind == frames.PUBLISH_UNKEPT:
        hub.received += 1
        message = decode_message(hub, body)[0]
        if message.retain and (on_retained := hub.on_retained) is not None:
            on_retained(message.topic, node if link.retained_written else "", message.forward_id)
        stats = hub.broker.stats
        quota_drops = stats.quota_drops
        # the records of local persistent sessions take the message's id (and a marker),
        # and a QoS 2 one's id says whether it was routed here before: without either, no
        # context to make (``node_caps.set_store`` keeps the count exact)
        forward_id = message.forward_id
        if forward_id and (message.qos == 2 or hub.broker.durable_sessions):
            context = DurableContext(None, forward_id)
        else:
            context = NO_DURABLE_CONTEXT
        routed = hub.broker.publish_from_peer(message, context)
        if isinstance(routed, int):
            if kind == frames.PUBLISH:
                _count_in(hub, link)
                if not _moved_away(hub, link, message, routed) and stats.quota_drops != quota_drops:
                    link.undelivered.append((link.published_in, ReasonCode.QUOTA_EXCEEDED))
            else:  # not kept by the sender: counted (RESUME, the next PUBLISH_ACK), no ack owed
                link.published_in += 1
                _moved_away(hub, link, message, routed)
        else:  # a large fan-out: confirmed after its last slice, the link's next frames behind
            link.fan_in(routed)
            routed.routed = partial(_fanned_out, hub, link, routed)
        return
    reader = BodyReader(body)
    if kind == frames.PUBLISH_ACK:
        count, reasons = frames.read_publish_ack(reader)
        link.confirmed(count, reasons)
        return
    announced = link.announced  # a resumed link's snapshot, until SNAPSHOT_END
    if kind == Kind.ROUTE:
        added = bool(reader.u8())
        topic_filter = reader.text()
        table.route(node, topic_filter, added)
        if announced is not None and added:
            announced.routes.add(topic_filter)
    elif kind == Kind.SHARE:
        added = bool(reader.u8())
        group, topic_filter = reader.text(), reader.text()
        table.share(node, group, topic_filter, added)
        if announced is not None and added:
            announced.shares.add((group, topic_filter))
    elif kind == Kind.DSUB:
        added = bool(reader.u8())
        client_id, key, topic_filter = reader.text(), reader.text(), reader.text()
        qos, flags = reader.u8(), reader.u8()
        tail = reader.rest()  # the sender's forward number then (an older sender: none)
        since = int.from_bytes(tail[:8], "big") if len(tail) >= 8 else -1
        # A session handed over from here keeps its hand-over entries (``table.moved``) for
        # ``MOVED_KEEP_S`` even once its new owner announces it: a third node's PUBLISH
        # frames sent with the route it had before our DGONE can arrive after that DSUB
        # (another link). Those go on to the new owner; the new owner's own frames after its
        # DSUB do not (it routed them with the session subscribed: ``to_orphans``).
        if added and announced is not None:
            announced.durable.add((client_id, key))
        durable = DurableSub(key, topic_filter, qos, flags, since, group_of(key))
        table.durable_sub(node, client_id, durable, added)
    elif kind == Kind.SNAPSHOT_END:
        if announced is not None:
            link.announced = None
            hub.recovery.reconciled(link, table.reconcile(node, announced))
    elif kind == Kind.DGONE:
        table.durable_gone(node, link.peer_epoch, reader.text(), hub.store is not None)
    elif kind == Kind.SHARED:
        _shared(hub, link, reader)
    elif kind == Kind.SHARED_ACK:
        out = link.shared_out
        for _ in range(reader.u32()):
            out.pop(reader.u32(), None)
    elif kind == Kind.DIRECT:
        client_id = reader.text()
        hub.direct.deliver(client_id, decode_message(hub, reader.rest()))
        _count_in(hub, link)
    elif kind == Kind.TAKEOVER:
        request, client_id = reader.u32(), reader.text()
        reader.u64()  # the epoch the requester expects (it repeats its claim anyway)
        ends_session = reader.rest()[:1] == b"\x01"  # a node of the version before sends none
        hub.spawn(hub.takeovers.hand_over(link, request, client_id, ends_session))
    elif kind == Kind.TAKEOVER_DONE:
        request, ok = reader.u32(), bool(reader.u8())
        hub.takeovers.done(request, ok)
    elif kind == Kind.PING:
        pass  # heard (``PeerLink.last_heard``)
    elif kind == Kind.RESUME:
        hub.recovery.resume(link, reader.u64())
        hub.resumed(link)
    elif kind == Kind.RETAINED_WRITTEN:
        topic, forward_id, revision = reader.text(), reader.text(), reader.u64()
        if (on_written := hub.on_retained_written) is not None:
            on_written(node, topic, forward_id, revision)
    else:
        raise frames.FrameError(f"unknown frame kind {kind}")


def _shared(hub: ClusterHub, link: PeerLink, reader: BodyReader) -> None:
    """A SHARED frame: one local member of its group gets the message. (A function of its
    own: its callback's closure would make ``handle_frame`` build an environment object on
    every call, PUBLISH frames included.)"""
    sequence, group, topic_filter = reader.u32(), reader.text(), reader.text()
    message = decode_message(hub, reader.rest())[0]
    stats = hub.broker.stats
    quota_drops = stats.quota_drops
    delivered = hub.broker.publish_shared_from_peer(
        group, topic_filter, message, partial(link.confirm_shared, sequence)
    )
    if link.shared_counted:  # PUBLISH_ACK: the member's record is written (or handed on)
        _count_in(hub, link)
        if not delivered and stats.quota_drops != quota_drops:
            link.undelivered.append((link.published_in, ReasonCode.QUOTA_EXCEEDED))


def _moved_away(hub: ClusterHub, link: PeerLink, message: Message, count: int) -> int:
    """A PUBLISH frame's ``count`` local deliveries, and its appends for the persistent
    sessions that moved away from here: all its deliveries (0 with a quota drop: 0x97).
    A session the sender has announced is not handed on: it delivered the message itself."""
    table = hub.table
    if len(table.moved):
        count += hub.orphans.to_orphans(table.moved, message, None, (link.peer_node,))
    return count


def _fanned_out(
    hub: ClusterHub, link: PeerLink, fanout: Fanout, count: int, quota_dropped: bool
) -> None:
    """The last slice of a PUBLISH frame's fan-out (``core.fanout_slices``): the frame is
    confirmable now, so its PUBLISH_ACK covers every slice's records — sent on the link that
    holds the peer run's counts (``link`` or the link that resumed it; none: given up, the
    peer run is treated as dead); that link reads on."""
    holder = hub.links.get(link.peer_node)
    frame = 0 if holder is None else holder.fanned_in(fanout)
    if holder is None or not frame:
        return
    if not _moved_away(hub, link, fanout.message, count) and quota_dropped:
        holder.undelivered.append((frame, ReasonCode.QUOTA_EXCEEDED))
    _confirm_soon(hub, holder)


def _count_in(hub: ClusterHub, link: PeerLink) -> None:
    link.published_in += 1
    _confirm_soon(hub, link)


def _confirm_soon(hub: ClusterHub, link: PeerLink) -> None:
    """A PUBLISH_ACK is owed: it goes out at the end of the read (or next loop turn)."""
    if not link.ack_pending:
        link.ack_pending = True
        link.ack_due = True
        if not link.reading:  # else the link confirms at the end of the read
            link.call_soon(confirm, hub, link)


def confirm(hub: ClusterHub, link: PeerLink) -> None:
    """Tell the sender how many PUBLISH / DIRECT (/ SHARED) frames are in our records (one
    ack per flush), once the frames of one read (or of one loop tick) are handled.

    DIRECT messages held for a claim in progress here are recorded only once the session is
    attached: the confirmation then waits for the hold to empty (``confirm_publishes``, a
    task). Then the store's writes: with none pending (the common case of clean
    subscribers) the ack is sent now, without a task; else a task waits for them."""
    if not link.ack_due:
        return  # started already
    link.ack_due = False
    count = link.confirmable
    if link.closed:  # nothing goes out on it any more
        link.ack_pending = False
        return
    store = hub.store
    if len(hub.direct) or (store is not None and not store.written()):
        hub.spawn(confirm_publishes(hub, link, count))
        return
    _ack(hub, link, count)


def _ack(hub: ClusterHub, link: PeerLink, count: int) -> None:
    link.ack_pending = False
    undelivered = link.undelivered
    if undelivered:
        covered = [entry for entry in undelivered if entry[0] <= count]
        link.undelivered = [entry for entry in undelivered if entry[0] > count]
        link.send(frames.publish_ack(count, covered))
    else:
        link.send(frames.publish_ack(count))
    if link.confirmable != count and not link.ack_pending:
        link.ack_pending = True
        link.ack_due = True
        link.call_soon(confirm, hub, link)


async def confirm_publishes(hub: ClusterHub, link: PeerLink, count: int) -> None:
    """The confirmation of the first ``count`` frames, once no DIRECT message is held here
    (bounded by the hold's limit) and the store has written what they caused."""
    direct = hub.direct
    for _ in range(int((direct.max_hold_s + 1.0) / POLL_S)):  # bounded by the hold's limit
        if not len(direct):
            break
        await asyncio.sleep(POLL_S)
    if hub.store is not None:
        await hub.store.flush()
    _ack(hub, link, count)
