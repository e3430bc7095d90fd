"""Cluster-wide retained messages in Redis (``retained:*`` keys of :mod:`xmq.contract.keys`).

Every retained change published on this node (set, or clear with an empty payload) is written
with :data:`~xmq.contract.retained_scripts.SET_RETAINED` through the node's
:class:`~xmq.store.redis_batcher.RedisBatcher`: all changes of one loop tick share one
pipeline, and the publisher never waits for Redis. A clear writes a tombstone that expires
after 24 h. At start a node loads every retained record (``retained:index`` then ``MGET``)
into its in-memory store, skipping tombstones, expired messages and topics that changed live
(here or over a node link) while it was loading: those changes are newer than the snapshot.

Changes of one topic made on two nodes at once cross on the links: once every change it
applied is announced as written (its own by Redis's reply, a peer's by ``RETAINED_WRITTEN``),
a node that does not hold the newest re-reads the topic (``retained_convergence``).
"""

from __future__ import annotations

import base64
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from xmq.codec.errors import ProtocolError
from xmq.codec.property_codec import decode_properties, encode_properties
from xmq.contract.keys import ClusterKeys
from xmq.contract.records import RetainedMessage
from xmq.contract.retained_scripts import RETAINED_TOMBSTONE_TTL_MS, SET_RETAINED
from xmq.core.cluster_ports import DurableHold
from xmq.core.message import Message
from xmq.routing.retained import RetainedStore
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.redis_endpoint import RedisEndpoint
from xmq.store.resp_connection import RedisReplyError, RespConnection
from xmq.store.retained_convergence import Change, RetainedConvergence

log = logging.getLogger("xmq.store.retained")

_PUBLISH = 3
_PROPERTIES = "mqtt5"
"""Key of ``RetainedMessage.properties`` holding the base64 MQTT 5 PUBLISH properties."""
_MGET_CHUNK = 500
_SYS = "$SYS/"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _checked(reply: Any) -> list[Any]:
    if isinstance(reply, Exception):
        raise reply
    if not isinstance(reply, list):
        raise RedisReplyError(f"unexpected reply {reply!r}")
    return reply


class RedisRetainedSync:
    """Writes this node's retained changes to Redis and loads the cluster's at start."""

    def __init__(
        self,
        batcher: RedisBatcher,
        keys: ClusterKeys,
        retained: RetainedStore[Message],
        loop_clock: Callable[[], float],
    ) -> None:
        self.batcher = batcher
        self.keys = keys
        self.retained = retained
        self.clock = loop_clock
        self.revisions: dict[str, int] = {}
        self._live: set[str] | None = None  # topics changed while loading
        self.written = 0
        self.failures = 0
        self.convergence = RetainedConvergence(self.revisions)
        # Tells the peers a change of ours is written: (topic, forward id, revision; 0: not
        # stored). Wired to the node links (``ClusterHub.retained_written``) by the app.
        self.announce: Callable[[str, str, int], None] | None = None
        self._changes = 0  # this node's changes, numbered
        self.rereads = 0

    # -- writes -----------------------------------------------------------------------------

    def changed(self, message: Message, hold: DurableHold | None = None) -> None:
        """Write a retained change; ``hold`` (the publisher's held ack, ``max_queued_writes``
        0) is held until Redis has answered, so the PUBACK / PUBREC follows the record."""
        topic = message.topic
        if topic.startswith(_SYS):
            return  # this node's own statistics, not cluster-wide state
        self.touched(topic)
        self._changes += 1
        change: Change = ("", str(self._changes))
        self.convergence.applied(topic, change)  # (never announced before it is made)
        record = self.record_of(message)
        ttl_ms = 0
        if record.tombstone:
            ttl_ms = RETAINED_TOMBSTONE_TTL_MS
        elif message.expires_at is not None:
            ttl_ms = max(1, math.ceil((message.expires_at - self.clock()) * 1000))

        def written(reply: Any, topic: str = topic) -> None:
            revision = 0
            if isinstance(reply, BaseException):  # given up after retries: never a success
                self.failures += 1
                log.warning("retained change of %r not stored: %r", topic, reply)
                if hold is not None:
                    hold.fail()
            else:
                if hold is not None:
                    hold.release()  # stored: the publisher's ack may go
                self.written += 1
                if isinstance(reply, int):
                    revision = reply
            forward_id = message.forward_id  # given when it went to the peers
            if forward_id and (announce := self.announce) is not None:
                announce(topic, forward_id, revision)
            if self.convergence.written(topic, change, revision):
                self.reread(topic)

        if hold is not None:
            hold.hold()
        self.batcher.script(
            SET_RETAINED,
            (self.keys.retained_revision(), self.keys.retained(topic), self.keys.retained_index()),
            (record.to_json(), ttl_ms, topic),
            callback=written,
        )

    def touched(self, topic: str) -> None:
        """A retained change of ``topic`` reached this node (locally or over a link)."""
        live = self._live
        if live is not None:
            live.add(topic)

    # -- changes of the peers ----------------------------------------------------------------

    def peer_changed(self, topic: str, node: str, forward_id: str) -> None:
        """A peer's retained change of ``topic`` is applied here (``node`` empty: a peer that
        announces no writes)."""
        self.touched(topic)
        if topic.startswith(_SYS):
            return  # the peer's own statistics: not written, never announced
        if not node or not forward_id:
            self.convergence.unannounced(topic)
        elif self.convergence.applied(topic, (node, forward_id)):
            self.reread(topic)

    def peer_written(self, node: str, topic: str, forward_id: str, revision: int) -> None:
        """``node`` announced its change of ``topic`` written with ``revision``."""
        if self.convergence.written(topic, (node, forward_id), revision):
            self.reread(topic)

    def peer_lost(self, node: str) -> None:
        """The link to ``node`` dropped: changes of it still unannounced never will be."""
        for topic in self.convergence.link_lost(node):
            self.reread(topic)

    def reread(self, topic: str) -> None:
        """Load ``topic``'s record from Redis again (the changes of it made at once have all
        been written: Redis holds the newest)."""
        self.rereads += 1

        def read(reply: Any) -> None:
            if isinstance(reply, BaseException):
                log.warning("retained %r not re-read: %r", topic, reply)
            elif isinstance(reply, bytes) and topic not in self.convergence.pending:
                self._apply(topic, reply, reread=True)  # (else: settles again when announced)

        self.batcher.command("GET", self.keys.retained(topic), callback=read)

    def record_of(self, message: Message) -> RetainedMessage:
        """The Redis record of a retained change (revision 1 is replaced by the script)."""
        if not message.payload:
            return RetainedMessage(topic=message.topic, revision=1, tombstone=True)
        properties: dict[str, str | int | list[str]] = {}
        if message.properties is not None:
            raw = encode_properties(message.properties, _PUBLISH)
            properties[_PROPERTIES] = base64.b64encode(raw).decode()
        expires_at = None
        if message.expires_at is not None:
            expires_at = max(0.0, time.time() + (message.expires_at - self.clock()))
        return RetainedMessage(
            topic=message.topic,
            revision=1,
            qos=message.qos,
            payload_b64=base64.b64encode(message.payload).decode(),
            properties=properties,
            expires_at=expires_at,
        )

    # -- start ------------------------------------------------------------------------------

    def begin_load(self) -> None:
        """Start recording live changes (call before the node links to its peers)."""
        self._live = set()

    async def load(self, url: RedisEndpoint | str, timeout_s: float) -> int:
        """Load every retained message from Redis; return how many were loaded."""
        if self._live is None:
            self._live = set()
        conn = await RespConnection.open(url, timeout_s)
        try:
            index = self.keys.retained_index()
            topics = [_text(t) for t in _checked(await conn.call("ZRANGE", index, 0, -1))]
            loaded = 0
            for start in range(0, len(topics), _MGET_CHUNK):
                chunk = topics[start : start + _MGET_CHUNK]
                raws = _checked(await conn.call("MGET", *(self.keys.retained(t) for t in chunk)))
                for topic, raw in zip(chunk, raws, strict=True):
                    if raw is not None and self._apply(topic, raw):
                        loaded += 1
            return loaded
        finally:
            self._live = None
            conn.close()

    def _apply(self, topic: str, raw: bytes, reread: bool = False) -> bool:
        try:
            record = RetainedMessage.from_json(raw)
        except ValueError as error:
            log.warning("malformed retained record of %r: %s", topic, error)
            return False
        live = self._live
        if not reread and live is not None and topic in live:
            return False  # changed since the node started: newer than this snapshot
        known = self.revisions.get(topic, 0)
        if record.revision < known or (record.revision == known and not reread):
            return False
        self.revisions[topic] = record.revision
        if record.tombstone:
            self.retained.delete(topic)
            return False
        now = self.clock()
        remaining: float | None = None
        if record.expires_at is not None:
            remaining = record.expires_at - time.time()
            if remaining <= 0:
                return False
        properties = None
        encoded = record.properties.get(_PROPERTIES)
        try:
            if isinstance(encoded, str) and encoded:
                data = base64.b64decode(encoded)
                properties, _ = decode_properties(data, 0, len(data), _PUBLISH)
            payload = base64.b64decode(record.payload_b64)
        except (ValueError, ProtocolError) as error:
            log.warning("malformed retained record of %r: %s", topic, error)
            return False
        message = Message(topic, payload, record.qos, True, properties, None, now)
        if remaining is not None:
            message.expires_at = int(now + remaining)
        self.retained.set(topic, message)
        return True
