"""Durable persistent sessions in Redis (implements ``core.cluster_ports.DurableStore``).

Each QoS 1/2 message owed to a persistent session is one record in ``session:queue:<client id>``
until the client acknowledges it (a QoS 1 record's removal rides in the next batch's
``FENCED_WRITES`` call: ``RedisBatcher.deferred_coalesced``; a QoS 2 record's ``LREM`` and
``HDEL`` are deferred commands: ``RedisBatcher.deferred``). A QoS 2 record that went out also
has its packet id in ``session:inflight:<client id>`` (``<id>`` or ``<id>:r`` once PUBREC came),
so a resuming node re-sends PUBLISH or PUBREL with the same packet id.

``max_queued_writes`` = 0: a delivery waits for its record (group-committed by the batcher:
one pipeline per loop tick), and so does the publisher's acknowledgement: a record made with a
``DurableContext`` whose ``hold`` is set (the core routing a QoS 1/2 PUBLISH) holds it until
written. The
batcher retries transient failures; a write it finally gives up fails the hold (the
publisher gets an error, never a success) and the delivery is dropped. A QoS 2
PUBLISH (PUBREL) also waits for its ``session:inflight`` state (``ids_first``; the core's
``owed_writes``): a node resuming the session after a kill -9 re-sends what the client saw.
An inbound QoS 2 id's ``SADD`` (``SREM``) holds the publisher's PUBREC (PUBCOMP) the same way.
N > 0: up to N deliveries go out before their records are written; beyond that the publishing
client's socket is paused until the backlog halves (acknowledgements are not held).

Records and inbound ids are fenced (``FENCED_WRITES``): Redis applies them only while this run
holds its lease, so writes still pending when the lease was lost (Redis paused past the TTL) are
refused (``FENCED``: the hold fails) instead of applied on resume. The records and ids queued
next to each other for one batcher flush go in ONE such call (``RedisBatcher.coalesced``): the
lease is checked once per batch, then each write in order; a refused call fails every hold in
it, and a call cut off by a lost connection is sent again with every record push-if-absent.

A message that came over a node link carries a cluster-wide id (``forward_id``, assigned by
the node that first forwarded it), passed to ``record`` as ``DurableContext.forward_id`` while
that message is routed here. Its non-shared records take that id as their record id and
each writes ``session:seen:<id>:<client id>`` (``SET ... PX``, in the same ``FENCED_WRITES``
call, right after the ``RPUSH``): a sender that replays the message after this node died
(``APPEND_IF_OWNER``) finds the marker and does not queue it twice. A persistent session's
inbound QoS 2 PUBLISH carries such an id from its first routing (``core.inbound_ids``), so the
same PUBLISH sent again to any node maps to it: a record whose marker exists is not pushed
(the script answers ``0``) and its delivery is dropped (``duplicates``), while the hold is
released — the session has the message. An inbound id's release moves the id's generation
on in the same script as its ``SREM`` (``RELEASE_INBOUND_ID``). The markers of an inbound
id (``session:seen`` and a group's ``shared:seen``) do not live ``seen_ttl_ms``: each joins the
message's index (``session:qos2marks:<message id>``) in the same call and lives until the
exchange is released (``mark_ttl_ms`` a ceiling); the release gives them ``release_grace_ms``
(a replay's 2 x lease TTL + 5 s) and deletes the index.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from xmq.contract.keys import ClusterKeys
from xmq.contract.message_record import encode_record
from xmq.contract.session_replies import AppendOutcome
from xmq.contract.session_scripts import (
    FORWARDED_SEEN_TTL_MS,
    INBOUND_MARK_TTL_MS,
    INBOUND_RELEASE_GRACE_MS,
    append_if_owner,
    is_inbound_id,
    release_inbound_id,
)
from xmq.core.cluster_ports import DurableContext, DurableHold, NodeIdentity, SubscriptionSpec
from xmq.core.inbound_ids import is_derived_id
from xmq.core.message import Message
from xmq.core.session import Delivery, Session, Subscription
from xmq.core.shared_claims import claim_id
from xmq.protocol.connect_terms import SESSION_NEVER_EXPIRES
from xmq.store.fenced_calls import FencedCalls
from xmq.store.forwarded_marks import ForwardedMarks
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.resp_connection import encode_lrem_one
from xmq.store.session_directory import subscription_json

if TYPE_CHECKING:
    from xmq.core.ports import SessionClient

log = logging.getLogger("xmq.store.sessions")

_WAITING_LIMIT = 20_000
"""With max_queued_writes 0: records waiting for Redis before publishers are paused."""


def _settle(hold: DurableHold) -> Callable[[Any], None]:
    """A reply callback: ``release`` the hold when written, ``fail`` it when given up."""

    def settle(reply: Any) -> None:
        if isinstance(reply, BaseException):
            hold.fail()
        else:
            hold.release()

    return settle


def _ignore(reply: Any) -> None:
    """The reply of a write nobody waits for."""


def record_id_of(record: bytes) -> bytes:
    """The id inside an encoded record (see ``xmq.contract.message_record``)."""
    return record[4 : 4 + record[3]]


class RedisSessionStore:
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
        self._last_id = 0  # of the records given an id of this node's own (``new_record``)
        self._id_prefix = ""  # "<node id>/<epoch>/" of ``_id_run`` (the run's record ids)
        self._id_run: tuple[str, int] = ("", -1)
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
        if not record_id:
            identity = self.identity
            node_id, epoch = identity.node_id, identity.epoch
            run = self._id_run
            if epoch != run[1] or node_id != run[0]:  # (the prefix is built once per run)
                self._id_run = (node_id, epoch)
                self._id_prefix = f"{node_id}/{epoch}/"
            self._last_id = number = self._last_id + 1
            record_id = self._id_prefix + str(number)
        else:
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
        return self._encode(message, qos, retain, subscription_ids, record_id)

    @staticmethod
    def _encode(
        message: Message,
        qos: int,
        retain: bool,
        subscription_ids: tuple[int, ...],
        record_id: str,
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
            if hold is not None:
                hold.hold()

            def recorded(reply: Any) -> None:
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
                if hold is not None:
                    hold.release()  # written (or queued before): the publisher's ack may go
                if reply == 0:  # its seen marker exists: queued for the session already
                    self.duplicates += 1  # (or, shared, for another member of its group)
                    settled = delivery.on_done
                    if settled is not None:  # a SHARED frame's: the group has it
                        delivery.on_done = None
                        settled()
                    return
                if session.store is self:
                    session.deliver_recorded(delivery, self.clock())

            self._push(session.client_id, raw, seen, marks, recorded)
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
        queue = self._queue_prefix + client_id
        written: tuple[str, ...]
        if marks:
            item, written = ("r", queue, raw, seen, marks), (queue, seen, marks)
        elif seen:
            item, written = ("r", queue, raw, seen, ""), (queue, seen)
        else:
            item, written = ("r", queue, raw, "", ""), (queue,)
        self.batcher.coalesced(FencedCalls.combine, self._calls(), item, written, callback)

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
        self.batcher.coalesced(FencedCalls.combine, self._calls(), item, (key, marks), answered)

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

    def sent(self, session: Session, delivery: Delivery) -> None:
        raw = delivery.record
        if raw is not None and delivery.qos == 2:
            self._inflight_state(session, delivery, raw, str(delivery.packet_id))

    def released(self, session: Session, delivery: Delivery) -> None:
        raw = delivery.record
        if raw is not None:
            self._inflight_state(session, delivery, raw, f"{delivery.packet_id}:r")

    def _inflight_state(self, session: Session, delivery: Delivery, raw: bytes, state: str) -> None:
        """``HSET session:inflight``; a PUBLISH / PUBREL waiting for it (``delivery.owed``,
        ``ids_first``) goes out once Redis has answered (``core.owed_writes``)."""
        key = self._inflight_prefix + session.client_id
        record_id = record_id_of(raw)
        if not delivery.owed:
            self.batcher.command("HSET", key, record_id, state)
            return
        clock = self.clock

        def stored(reply: Any) -> None:
            if isinstance(reply, BaseException):
                # not stored: sent now, a resuming node could not re-send it under its id
                self.failed += 1
                log.error("QoS 2 state of %r not written: %r", session.client_id, reply)
                conn = session.connection
                if conn is not None:
                    conn.link.close()  # the client comes back and resumes from Redis
                return
            session.state_recorded(delivery, clock())

        self.batcher.command("HSET", key, record_id, state, callback=stored)

    def acknowledged(self, session: Session, delivery: Delivery) -> None:
        raw = delivery.record
        if raw is None:
            return
        client_id = session.client_id
        queue = self._queue_prefix + client_id
        # deferred: they ride with the next flush (bounded by LAZY_FLUSH_S). A node killed
        # before they are written re-sends a QoS 1 message (allowed), and a QoS 2 message's
        # PUBREL only (its ``:r`` state went to Redis ahead of them — with max_queued_writes 0
        # before that PUBREL went out; the client answers PUBCOMP, nothing delivered twice).
        # Later commands (the state of a packet id used again) never pass them.
        batcher = self.batcher
        if delivery.qos != 2:
            # in the next batch's FENCED_WRITES call (no command nor reply of its own): refused
            # with it (a run without a lease), the record stays, as after a kill -9
            batcher.deferred_coalesced(
                FencedCalls.combine, self._calls(), ("l", queue, raw, "", ""), (queue,), _ignore
            )
            return
        # a QoS 2 record's LREM and HDEL go together, unfenced: a removal refused while its
        # state went would leave a record a resuming node sends again as a new PUBLISH
        batcher.deferred(("LREM", queue, 1, raw), encode_lrem_one(queue, raw))
        batcher.deferred(("HDEL", self._inflight_prefix + client_id, record_id_of(raw)))

    def restored(self, session: Session, deliveries: Iterable[Delivery]) -> None:
        client_id = session.client_id
        for delivery in deliveries:
            raw = delivery.record
            if raw is None:
                continue
            record_id = record_id_of(raw).decode()
            if is_derived_id(record_id):  # a forward id or an inbound QoS 2 message id
                self._recent.add((client_id, record_id))  # bounded, the oldest out

    def inbound_changed(
        self,
        session: Session,
        packet_id: int,
        added: bool,
        hold: DurableHold | None,
        generation: int | None = None,
    ) -> None:
        key = self.keys.session_qos2_inbound(session.client_id)
        callback = None
        if hold is not None:
            hold.hold()  # the PUBREC waits for the id's SADD too, a PUBCOMP for its SREM
            callback = _settle(hold)
        if added:  # fenced: a stale run's id would make the re-sent PUBLISH look handled
            self.batcher.coalesced(
                FencedCalls.combine,
                self._calls(),
                ("i", key, str(packet_id), "", ""),
                (key,),
                callback or _ignore,
            )
            return
        if generation is None:  # a session without inbound message ids
            self.batcher.command("SREM", key, packet_id, callback=callback)
            return
        # removed, and its release count moved on (the id's next message is a new one): once;
        # the released message's markers (its index) keep only a replay's grace
        ids = session.inbound_ids
        message_id = f"{ids.incarnation}/q{packet_id}.{generation}" if ids is not None else ""
        script, keys, args = release_inbound_id(
            self.keys, session.client_id, packet_id, generation, message_id, self.release_grace_ms
        )
        self.batcher.script(script, keys, args, callback=callback)

    def subscribed(
        self,
        session: Session,
        key: str,
        sub: Subscription | None,
        hold: DurableHold | None = None,
    ) -> None:
        subs_key = self.keys.session_subscriptions(session.client_id)
        if sub is None:
            self.batcher.command("HDEL", subs_key, key)
            return
        spec = SubscriptionSpec(
            key,
            sub.topic_filter,
            sub.qos,
            sub.no_local,
            sub.retain_as_published,
            sub.retain_handling,
            sub.identifier,
            sub.share_group,
        )
        if hold is None:
            self.batcher.command("HSET", subs_key, key, subscription_json(spec))
            return
        hold.hold()
        self.batcher.command("HSET", subs_key, key, subscription_json(spec), callback=_settle(hold))

    def disconnected(self, session: Session) -> None:
        client_id = session.client_id
        keys = self.keys
        self.batcher.command("HSET", keys.session_state(client_id), "disconnected_at", time.time())
        if session.expiry_s >= SESSION_NEVER_EXPIRES:
            return
        # Redis forgets the session when it expires, even if its owner node is dead by then
        # (the owner's own timer releases it earlier when it lives).
        ttl = session.expiry_s + 1
        for key in (
            keys.session_owner(client_id),
            keys.session_state(client_id),
            keys.session_subscriptions(client_id),
            keys.session_queue(client_id),
            keys.session_inflight(client_id),
            keys.session_qos2_inbound(client_id),
            keys.session_qos2_generations(client_id),
        ):
            self.batcher.command("EXPIRE", key, ttl)

    async def flush(self) -> None:
        await self.batcher.flush()

    def written(self) -> bool:
        # an acknowledged record's deferred removal (``acknowledged``) is not waited for: a
        # node link's confirmation goes now, without a task and a flush of its own
        return self.batcher.settled

    # -- sessions owned by a dead (or departed) node ----------------------------------------

    def append_if_owner(
        self,
        client_id: str,
        owner: tuple[str, int],
        message: Message,
        qos: int,
        retain: bool,
        on_moved: Callable[[str, int], None],
        hold: DurableHold | None = None,
    ) -> None:
        """Append to the session's Redis queue while ``owner`` still owns it (else ``on_moved``).

        ``hold`` is released once Redis has answered (after ``on_moved``, which takes its own
        holds for wherever it sends the message). A forwarded message is appended under its
        ``forward_id``, and skipped when the session's marker of it exists; any other under
        its record's id, which only this append's retries can find.
        """
        forward_id = message.forward_id
        raw = self.new_record(message, qos, retain, (), forward_id)
        # one published here has no id of its own: its record's new id keys the marker, so
        # the append sent again after a lost reply (a dead connection) is not queued twice
        marker_id = forward_id or self._id_prefix + str(self._last_id)
        identity = self.identity
        script, keys, args = append_if_owner(
            self.keys,
            client_id,
            owner,
            raw,
            marker_id,
            self.seen_ttl_ms,
            (identity.node_id, identity.epoch),  # the fencing token of this run
            self.mark_ttl_ms,
        )
        if hold is not None:
            hold.hold()

        def done(reply: Any) -> None:
            if isinstance(reply, list) and reply and int(reply[0]) == AppendOutcome.WRITER_FENCED:
                return  # this run has no lease: nothing written, so no acknowledgement either
            try:
                if isinstance(reply, list) and reply and int(reply[0]) == AppendOutcome.MOVED:
                    node = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
                    on_moved(node, int(reply[2]))
            finally:
                if hold is not None:
                    if isinstance(reply, BaseException):
                        log.error("append for %r not written: %r", client_id, reply)
                        hold.fail()
                    else:
                        hold.release()

        self.batcher.script(script, keys, args, callback=done)
