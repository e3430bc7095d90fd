"""An application message as the broker routes it, encoded once per wire variant.

A PUBLISH reaching N subscribers is encoded once per distinct variant (protocol version, QoS,
retain flag, subscription identifiers, topic alias, remaining expiry) and the bytes are shared;
the packet id of each subscriber is put between ``head`` and ``tail`` at write time.
"""

from __future__ import annotations

import struct
from typing import Final

from mypy_extensions import mypyc_attr  # a runtime dependency (pyproject): a no-op when pure

from xmq.codec.packets import MQTT_5
from xmq.codec.properties import Properties
from xmq.codec.writer import encode_publish_parts

EncodedPublish = tuple[bytes, ...]
"""``(head, tail)`` of a PUBLISH, always two items. Typed as a variable-length tuple on purpose:
mypyc keeps a fixed-length ``tuple[bytes, bytes]`` as a C struct, so ``Message.encode`` would
build a new tuple for every send instead of returning the cached one."""
_NO_IDS: tuple[int, ...] = ()
_NO_WIRE: EncodedPublish = ()
"""``Message._wire0`` while it has no first variant (``_key0`` is then ``-1``)."""
_MAX_VARIANTS: Final = 63
"""Variants cached besides the first (``Message._variants``)."""

_PLAIN_HEAD = struct.Struct("<BqIiIHHII")
"""A message as plain bytes (``Message.plain``): flags (QoS, retain, has origin, has expiry),
``expires_at``, size, the key of its one cached wire variant (``-1``: none), then the lengths
of its topic, origin, forward id, payload and the variant's head; those follow in that
order, and the variant's tail is the rest."""
_RETAIN: Final = 4
_ORIGIN: Final = 8
_EXPIRES: Final = 16


@mypyc_attr(free_list_len=1)
class Message:
    """One application message; immutable once routed (but for ``forward_id``, given once by
    the cluster when the message first leaves this node: ``ClusterHub.forward_raw``).

    Compiled, the last one freed is kept for the next one made (``free_list_len=1``, as
    ``Delivery``): a point-to-point message is freed at its PUBACK and the next one is made
    from it, without the allocator's ``malloc`` and ``free``; its attributes are cleared when
    it is freed, and the ones unset until first queued (``queued_refs``, ``queued_key``) are
    unset again in the one made from it."""

    __slots__ = (
        "_forward_id",
        "_forward_raw",
        "_key0",
        "_variants",
        "_wire0",
        "expires_at",
        "origin",
        "payload",
        "properties",
        "qos",
        "queued_key",
        "queued_refs",
        "retain",
        "size",
        "topic",
    )

    expires_at: int | None
    """Broker-clock second at which the message expires (``None``: never)."""
    queued_refs: int
    """Queued deliveries of this message, unset until the first (see ``core.memory_cost``)."""
    queued_key: object
    """Its key (an ``int``) in the queues' message table, unset until first queued
    (``core.delivery_queue``)."""

    def __init__(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        properties: Properties | None,
        origin: str | None,
        now: float,
        wire: EncodedPublish | None = None,
        wire_version: int = 0,
        forward_id: str = "",
    ) -> None:
        """``wire``: the message exactly as a ``wire_version`` client would receive it at its
        own QoS without retain (the publisher's bytes, when it sent no properties).
        ``forward_id``: the id another node gave it (a message received over a node link)."""
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.origin = origin
        self._forward_id = forward_id
        self._forward_raw = b""  # (``forward_raw``: the id as UTF-8, when given as that)
        self.size = len(payload) + len(topic)
        expires_at: int | None = None
        if properties is not None:
            # Only the properties a subscriber may see are kept (never the alias or the
            # publisher's subscription identifiers).
            properties.topic_alias = None
            properties.subscription_identifiers = None
            if properties.message_expiry_interval is not None:
                # An integer deadline (whole seconds of the broker clock, rounded down: never
                # late): the remaining interval is then integer arithmetic and never exceeds
                # what was sent (MQTT-3.3.2-6); float ``now + 3600 - now`` can give 3601.
                expires_at = int(now) + properties.message_expiry_interval
            if properties.is_empty():
                properties = None
        self.properties = properties
        self.expires_at = expires_at
        # The first variant with an integer key (the common ones: see ``encode``) as two
        # fields, the others in a dict made at the second: a point-to-point message, encoded
        # once, makes no dict (~300 instructions to make, fill and free one, compiled).
        self._key0 = -1 if wire is None else wire_version << 3 | qos << 1
        self._wire0 = _NO_WIRE if wire is None else wire
        self._variants: dict[object, EncodedPublish] | None = None

    @property
    def forward_id(self) -> str:
        """The message's cluster-wide id (``<node>/<epoch>/f<n>``) once it has crossed a node
        link (as sent, or as received), or from the start a persistent session's inbound QoS 2
        message id (``<incarnation>/q<packet id>.<generation>``, ``core.inbound_ids``: the
        same when the PUBLISH is sent again to any node); ``''`` otherwise, and always without
        a cluster. An id given as UTF-8 (``give_forward_raw``) is decoded when first read."""
        forward_id = self._forward_id
        if not forward_id and self._forward_raw:
            self._forward_id = forward_id = self._forward_raw.decode()
        return forward_id

    @forward_id.setter
    def forward_id(self, forward_id: str) -> None:
        self._forward_id = forward_id
        self._forward_raw = b""

    @property
    def forward_raw(self) -> bytes:
        """``forward_id`` as UTF-8 (``b''``: none), encoded once."""
        raw = self._forward_raw
        if not raw and self._forward_id:
            self._forward_raw = raw = self._forward_id.encode()
        return raw

    def give_forward_raw(self, raw: bytes) -> None:
        """Give the message its ``forward_id`` as UTF-8 (the cluster's forward of a message
        that has none: ``ClusterHub.forward_raw``): the frame takes these bytes, the ``str``
        is made only if something reads it."""
        self._forward_id = ""
        self._forward_raw = raw

    def plain(self) -> bytes | None:
        """This message as one ``bytes`` object (``None`` when it has properties: objects)
        with at most one of its cached wire variants: not an object the cyclic collector
        tracks, nor a container it walks (``core.delivery_queue``)."""
        if self.properties is not None:
            return None
        key, head, tail = -1, b"", b""
        if self._key0 >= 0:
            key, (head, tail) = self._key0, self._wire0
        topic = self.topic.encode()
        origin = self.origin.encode() if self.origin is not None else b""
        forward_id = self.forward_raw
        expires_at = self.expires_at
        flags = (
            self.qos
            | (_RETAIN if self.retain else 0)
            | (_ORIGIN if self.origin is not None else 0)
            | (_EXPIRES if expires_at is not None else 0)
        )
        payload = self.payload
        return b"".join(
            (
                _PLAIN_HEAD.pack(
                    flags,
                    expires_at or 0,
                    self.size,
                    key,
                    len(topic),
                    len(origin),
                    len(forward_id),
                    len(payload),
                    len(head),
                ),
                topic,
                origin,
                forward_id,
                payload,
                head,
                tail,
            )
        )

    @classmethod
    def from_plain(cls, plain: bytes) -> Message:
        """The message ``plain`` holds, as it was routed (``Message.plain``)."""
        flags, expires_at, size, key, topic_n, origin_n, forward_n, payload_n, head_n = (
            _PLAIN_HEAD.unpack_from(plain)
        )
        at = _PLAIN_HEAD.size
        topic = plain[at : at + topic_n].decode()
        at += topic_n
        origin = plain[at : at + origin_n].decode() if flags & _ORIGIN else None
        at += origin_n
        forward_id = plain[at : at + forward_n].decode()
        at += forward_n
        payload = plain[at : at + payload_n]
        at += payload_n
        # no properties: its size, expiry and cached variant as routed, set after ``__init__``
        # (a constructor call: mypyc has no ``cls.__new__`` for a compiled class)
        message = cls(
            topic, payload, flags & 3, bool(flags & _RETAIN), None, origin, 0.0, None, 0, forward_id
        )
        message.size = size
        message.expires_at = expires_at if flags & _EXPIRES else None
        if key >= 0:
            message._key0 = key
            message._wire0 = (plain[at : at + head_n], plain[at + head_n :])
        return message

    def without_id(self) -> Message:
        """This message under no cluster-wide id (``forward_id`` empty; a node link gives it
        a new one): a shared group's message handed on from the member that had it to
        another (``core.shared_claims.handed_on``)."""
        copy = Message(self.topic, self.payload, self.qos, self.retain, None, self.origin, 0.0)
        copy.properties = self.properties
        copy.expires_at = self.expires_at
        copy.size = self.size
        copy._key0 = self._key0
        copy._wire0 = self._wire0
        variants = self._variants
        copy._variants = dict(variants) if variants is not None else None
        return copy

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def encode(
        self,
        protocol_version: int,
        qos: int,
        retain: bool,
        subscription_ids: tuple[int, ...] = _NO_IDS,
        alias: int = 0,
        send_topic: bool = True,
        now: float = 0.0,
    ) -> EncodedPublish:
        """Return ``(head, tail)`` of this message for one wire variant (cached)."""
        remaining = 0
        int_key = -1
        if (
            self.expires_at is None and not subscription_ids and not alias and send_topic
        ) or protocol_version != MQTT_5:
            int_key = protocol_version << 3 | qos << 1 | retain  # the common variants
            if int_key == self._key0:
                return self._wire0
            key: object = int_key
        else:
            if self.expires_at is not None:
                remaining = max(1, self.expires_at - int(now))
            key = (qos, retain, subscription_ids, alias, send_topic, remaining)
        variants = self._variants
        if variants is not None:
            cached = variants.get(key)
            if cached is not None:
                return cached
        variant = self._encode(
            protocol_version, qos, retain, subscription_ids, alias, send_topic, remaining
        )
        if int_key >= 0 and self._key0 < 0:
            self._key0 = int_key
            self._wire0 = variant
        elif variants is None:
            self._variants = {key: variant}
        elif len(variants) < _MAX_VARIANTS:
            variants[key] = variant
        return variant

    def _encode(
        self,
        protocol_version: int,
        qos: int,
        retain: bool,
        subscription_ids: tuple[int, ...],
        alias: int,
        send_topic: bool,
        remaining: int,
    ) -> EncodedPublish:
        props: Properties | None = None
        if protocol_version == MQTT_5:
            base = self.properties
            if base is not None or subscription_ids or alias:
                props = base.copy() if base is not None else Properties()
                if subscription_ids:
                    props.subscription_identifiers = list(subscription_ids)
                if alias:
                    props.topic_alias = alias
                if remaining:
                    props.message_expiry_interval = remaining
        topic = self.topic if send_topic else ""
        return encode_publish_parts(topic, self.payload, qos, retain, props, protocol_version)


def routed_message(
    topic: str,
    payload: bytes,
    qos: int,
    retain: bool,
    properties: Properties | None,
    origin: str | None,
    now: float,
    wire: EncodedPublish | None,
    wire_version: int,
) -> Message:
    """``Message(...)`` for an interpreted caller on the hot path (``route_publish``): called
    from interpreted code, a compiled class's constructor parses its arguments through
    ``tp_init``'s tuple-and-keywords parser (~650 instructions for these nine, measured under
    callgrind), a compiled function through the vectorcall one; this call is a C call."""
    return Message(topic, payload, qos, retain, properties, origin, now, wire, wire_version)
