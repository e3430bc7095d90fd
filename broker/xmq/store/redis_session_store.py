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
from typing import Any

from xmq.contract.session_replies import AppendOutcome
from xmq.contract.session_scripts import append_if_owner, release_inbound_id
from xmq.core.cluster_ports import DurableHold, SubscriptionSpec
from xmq.core.inbound_ids import is_derived_id
from xmq.core.message import Message
from xmq.core.session import Delivery, Session, Subscription
from xmq.protocol.connect_terms import SESSION_NEVER_EXPIRES
from xmq.store.fenced_calls import FENCED_COMBINE
from xmq.store.resp_connection import encode_lrem_one
from xmq.store.session_directory import subscription_json
from xmq.store.session_records import SessionRecords

log = logging.getLogger("xmq.store.sessions")


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


class RedisSessionStore(SessionRecords):
    """Persistent sessions' records and their state in Redis: the in-flight QoS 2 states,
    removals, subscriptions, inbound ids, and appends for dead owners' sessions."""

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
        queue = self.queue_key(client_id)
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
                FENCED_COMBINE, self._calls(), ("l", queue, raw, "", ""), (queue,), _ignore
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
                FENCED_COMBINE,
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
        marker_id = forward_id or self.record_ids.last_id()
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
