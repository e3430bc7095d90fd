"""The records of persistent sessions: encoded, written through the shared batcher (a held
acknowledgement with ``max_queued_writes`` 0, fenced, a forwarded message recorded once per
session), and publishers paused while too many wait — the base of
``store.redis_session_store.RedisSessionStore`` (whose docstring tells the whole model).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import mypyc_attr  # a runtime dependency (pyproject): a no-op when pure

from xmq.contract.keys import ClusterKeys
from xmq.contract.message_record import encode_record
from xmq.contract.session_scripts import (
    FORWARDED_SEEN_TTL_MS,
    INBOUND_MARK_TTL_MS,
    INBOUND_RELEASE_GRACE_MS,
    is_inbound_id,
)
from xmq.core.cluster_ports import DurableContext, DurableHold, NodeIdentity, RunIds
from xmq.core.held_acks import HeldAck
from xmq.core.message import Message
from xmq.core.session import Delivery, Session, Subscription
from xmq.core.shared_claims import claim_id
from xmq.store.fenced_calls import FENCED_COMBINE, FencedCalls
from xmq.store.forwarded_marks import ForwardedMarks
from xmq.store.redis_batcher import RedisBatcher

if TYPE_CHECKING:
    from xmq.core.ports import SessionClient

log = logging.getLogger("xmq.store.sessions")

_WAITING_LIMIT = 20_000
"""With max_queued_writes 0: records waiting for Redis before publishers are paused."""

_QUEUES_MAX: Final = 4096
"""Sessions whose queue key is kept (``SessionRecords.queue_key``); more: all made again."""


class SessionRecords:
    """Records of persistent sessions, written through the shared batcher."""

    def __init__(
        self,
        batcher: RedisBatcher,
        keys: ClusterKeys,
        identity: NodeIdentity,
        sessions: dict[str, Session],
        clock: Callable[[], float],
        max_queued_writes: int = 0,
        seen_ttl_ms: int = FORWARDED_SEEN_TTL_MS,
        release_grace_ms: int = INBOUND_RELEASE_GRACE_MS,
        mark_ttl_ms: int = INBOUND_MARK_TTL_MS,
    ) -> None:
        self.batcher = batcher
        self.keys = keys
        self.identity = identity
        self.sessions = sessions
        self.clock = clock
        self.max_queued_writes = max_queued_writes
        self.ids_first = max_queued_writes == 0  # see DurableStore.ids_first
        self.limit = max_queued_writes or _WAITING_LIMIT
        self.unwritten = 0
        self.records = 0
        self.failed = 0  # writes given up (their acks were refused)
        self.duplicates = 0  # records not made: the session had the message's id queued
        self.record_ids = RunIds(identity)  # of the records given an id of this node's own
        self._paused: set[SessionClient] = set()
        self.seen_ttl_ms = seen_ttl_ms
        # an inbound QoS 2 message's markers: kept while its exchange is open (at most
        # ``mark_ttl_ms``), ``release_grace_ms`` once it is released (RELEASE_INBOUND_ID)
        self.release_grace_ms = release_grace_ms
        self.mark_ttl_ms = mark_ttl_ms
        # (client id, forward id) of the latest forwarded records made here (or read back by
        # a claim, ``restored``): a message reaching one session by two paths is recorded once
        self._recent = ForwardedMarks(clock)
        self._fenced = FencedCalls(
            keys, (identity.node_id, identity.epoch), seen_ttl_ms, mark_ttl_ms
        )
        # the per-message keys' constant parts (``keys.session_queue(id)`` is
        # ``_queue_prefix + id``: a concatenation, not a call building the whole key)
        self._queue_prefix = keys.session_queue("")
        self._inflight_prefix = keys.session_inflight("")
        # client id -> its queue's key, one object per session while kept: a record and its
        # removal name it without a concatenation, and ``FencedCalls``' per-key encodings
        # find it by a hash it keeps
        self._queues: dict[str, str] = {}
        self._last_record: tuple[Message, int, bool, tuple[int, ...], str, bytes] | None = None
        """The last record encoded under a forwarded message's id (``new_record``)."""

    # -- records ----------------------------------------------------------------------------

    def new_record(
        self,
        message: Message,
        qos: int,
        retain: bool,
        subscription_ids: tuple[int, ...],
        record_id: str = "",
    ) -> bytes:
        """Encode a record under ``record_id`` (a forwarded message's id), else a new id.

        The records of one forwarded message routed to many sessions here are equal (same
        id, message and delivery terms): the last one encoded is given again, one object that
        every queue holding it shares (``core.delivery_queue``), not one per session."""
        if not record_id:  # "<node id>/<epoch>/<n>", made as bytes
            return self._encode(message, qos, retain, subscription_ids, self.record_ids.next_raw())
        last = self._last_record
        if (
            last is not None
            and last[0] is message
            and last[1] == qos
            and last[2] == retain
            and last[3] == subscription_ids
            and last[4] == record_id
        ):
            return last[5]
        raw = self._encode(message, qos, retain, subscription_ids, record_id)
        self._last_record = (message, qos, retain, subscription_ids, record_id, raw)
        return raw

    @staticmethod
    def _encode(
        message: Message,
        qos: int,
        retain: bool,
        subscription_ids: tuple[int, ...],
        record_id: str | bytes,
    ) -> bytes:
        return encode_record(
            record_id,
            message.topic,
            message.payload,
            message.qos,
            message.retain,
            message.properties,
            message.origin,
            qos,
            retain,
            subscription_ids,
        )

    def record(
        self, session: Session, delivery: Delivery, now: float, context: DurableContext
    ) -> bool:
        message = delivery.message
        forward_id = context.forward_id
        mark: tuple[str, str] | None = None
        share = delivery.share
        seen = marks = ""
        if share is None:
            if forward_id:
                mark = (session.client_id, forward_id)
                if not self._recent.add(mark):
                    # recorded here for this session already (it came two ways, or was sent
                    # again): the session has it, which counts as delivered, but not twice
                    self.duplicates += 1
                    return True
                seen = self.keys.session_seen(session.client_id, forward_id)
                if message.qos == 2 and is_inbound_id(forward_id):
                    # kept, in the message's index, until its exchange is released
                    marks = self.keys.inbound_marks(forward_id)
        else:
            forward_id = ""
            # a member's record of an inbound QoS 2 message marks the group: a re-sent
            # PUBLISH routed again gives the group no second copy (core.shared_claims)
            if message.qos == 2 and message.forward_id and share.share_group:
                group_id = claim_id(message)
                if group_id:
                    seen = self.keys.shared_seen(group_id, share.share_group, share.topic_filter)
                    marks = self.keys.inbound_marks(group_id)
        raw = self.new_record(
            message, delivery.qos, delivery.retain, delivery.subscription_ids, forward_id
        )
        delivery.record = raw
        self.records += 1
        self.unwritten += 1
        if self.max_queued_writes == 0:
            hold = context.hold
            # (the same call twice: compiled, a HeldAck's is direct, the port's generic)
            if type(hold) is HeldAck:  # noqa: SIM114
                hold.hold()
            elif hold is not None:
                hold.hold()
            # one object waits for the reply (not a closure and the environment of this call)
            self._push(
                session.client_id, raw, seen, marks, RecordWait(self, session, delivery, hold, mark)
            )
            if self.unwritten > self.limit:
                self._pause(message.origin)
            return True
        self._push(session.client_id, raw, seen, marks, self._written_reply)
        if self.unwritten > self.limit:
            self._pause(message.origin)
        return session.deliver_recorded(delivery, now)

    def _push(
        self, client_id: str, raw: bytes, seen: str, marks: str, callback: Callable[[Any], None]
    ) -> None:
        """``RPUSH`` the record (and ``SET`` its ``seen`` marker, when it has one, unless the
        marker exists; ``marks``: the inbound message's marker index it joins) while this run
        holds its lease; a stale run's write is refused (``FENCED``: the callback gets the
        failure)."""
        queue = self.queue_key(client_id)
        written: tuple[str, ...]
        if marks:
            item, written = ("r", queue, raw, seen, marks), (queue, seen, marks)
        elif seen:
            item, written = ("r", queue, raw, seen, ""), (queue, seen)
        else:
            item, written = ("r", queue, raw, "", ""), (queue,)
        self.batcher.coalesced(FENCED_COMBINE, self._calls(), item, written, callback)

    def claim_shared(
        self,
        share: Subscription,
        message_id: str,
        hold: DurableHold | None,
        claimed: Callable[[bool], None],
    ) -> None:
        """Claim ``share``'s group for the message (``SET shared:seen:...`` unless it exists,
        in this run's ``FENCED_WRITES`` call); ``claimed(True)`` once written, ``claimed(False)``
        when the group has it already; on a write given up (or fenced) neither: ``hold`` fails."""
        group = share.share_group or ""
        key = self.keys.shared_seen(message_id, group, share.topic_filter)
        if hold is not None:
            hold.hold()
        member = share.session.client_id

        def answered(reply: Any) -> None:
            if isinstance(reply, BaseException):
                self.failed += 1
                if "FENCED" not in str(reply):
                    log.error("shared claim for %r not written: %r", member, reply)
                if hold is not None:
                    hold.fail()
                return
            if hold is not None:
                hold.release()
            if reply == 0:
                self.duplicates += 1
            claimed(reply == 1)

        marks = self.keys.inbound_marks(message_id)  # the claim lives while the exchange is open
        item = ("c", key, member, "", marks)
        self.batcher.coalesced(FENCED_COMBINE, self._calls(), item, (key, marks), answered)

    def queue_key(self, client_id: str) -> str:
        """``keys.session_queue(client_id)``, the same object while kept (``_QUEUES_MAX``)."""
        queue = self._queues.get(client_id)
        if queue is None:
            queues = self._queues
            if len(queues) >= _QUEUES_MAX:
                queues.clear()
            queue = queues[client_id] = self._queue_prefix + client_id
        return queue

    def _calls(self) -> FencedCalls:
        """This run's ``FENCED_WRITES`` calls (the batcher coalesces the writes of one
        ``FencedCalls``: of one run)."""
        fenced = self._fenced
        identity = self.identity
        if fenced.epoch != identity.epoch or fenced.node_id != identity.node_id:
            fenced = self._fenced = FencedCalls(
                self.keys, (identity.node_id, identity.epoch), self.seen_ttl_ms, self.mark_ttl_ms
            )
        return fenced

    def recorded(
        self,
        reply: Any,
        session: Session,
        delivery: Delivery,
        hold: DurableHold | None,
        mark: tuple[str, str] | None,
    ) -> None:
        """The reply of a record's write with ``max_queued_writes`` 0 (``RecordWait``): the
        publisher's held ack is released (or failed), the delivery sent once it is written."""
        self._written()
        if isinstance(reply, BaseException):  # given up: no ack, no delivery
            self.failed += 1
            if mark is not None:  # not recorded: the message may come again
                self._recent.discard(mark)
            if "FENCED" not in str(reply):  # (fenced: said once by the batcher)
                log.error("record for %r not written: %r", session.client_id, reply)
            if hold is not None:
                hold.fail()
            return
        # written (or queued before): the publisher's ack may go (a ``HeldAck``: a direct call)
        if type(hold) is HeldAck:  # noqa: SIM114
            hold.release()
        elif hold is not None:
            hold.release()
        if reply == 0:  # its seen marker exists: queued for the session already
            self.duplicates += 1  # (or, shared, for another member of its group)
            settled = delivery.on_done
            if settled is not None:  # a SHARED frame's: the group has it
                delivery.on_done = None
                settled()
            return
        store: object = session.store  # (typed as the port; this object is one)
        if store is self:
            # the loop time the reply's read began (one clock read per Redis read, which the
            # read's end needs anyway), else (outside such a read) the clock's
            now = self.batcher.reply_time()
            session.deliver_recorded(delivery, now if now > 0.0 else self.clock())

    def _written_reply(self, reply: Any) -> None:
        self._written()

    def _written(self) -> None:
        self.unwritten -= 1
        if self._paused and self.unwritten <= self.limit // 2:
            paused, self._paused = self._paused, set()
            for conn in paused:
                conn.link.resume_reading()

    def _pause(self, origin: str | None) -> None:
        session = self.sessions.get(origin) if origin is not None else None
        conn = session.connection if session is not None else None
        if conn is not None and conn not in self._paused:
            self._paused.add(conn)
            conn.link.pause_reading()


@mypyc_attr(free_list_len=1)
class RecordWait:
    """What waits for one record's write with ``max_queued_writes`` 0: the batcher's callback
    (``SessionRecords.recorded`` with the record's session, delivery, hold and forwarded
    mark). One slotted object per record, where a closure was two (it and its call's
    environment), each made, filled and freed per durable message. Compiled, the last one
    freed is kept for the next one made (``free_list_len=1``, as ``Delivery``)."""

    __slots__ = ("delivery", "hold", "mark", "records", "session")

    def __init__(
        self,
        records: SessionRecords,
        session: Session,
        delivery: Delivery,
        hold: DurableHold | None,
        mark: tuple[str, str] | None,
    ) -> None:
        self.records = records
        self.session = session
        self.delivery = delivery
        self.hold = hold
        self.mark = mark

    def __call__(self, reply: Any) -> None:
        self.records.recorded(reply, self.session, self.delivery, self.hold, self.mark)
