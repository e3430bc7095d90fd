"""Cluster-wide client id ownership in Redis (``session:owner:<client id>``).

One ``CLAIM_SESSION`` script per CONNECT, queued on the shared :class:`RedisBatcher`, so the
connects of one loop tick share a pipeline. The reply of a claim that resumes a persistent
session carries the stored copy, decoded here into core deliveries.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable

from xmq.contract.keys import ClusterKeys
from xmq.contract.message_record import RecordError, decode_record
from xmq.contract.session_replies import ClaimOutcome as ScriptOutcome
from xmq.contract.session_replies import ClaimReply, ReleaseOutcome, StoredSession
from xmq.contract.session_scripts import (
    INBOUND_RELEASE_GRACE_MS,
    claim_session,
    release_session,
)
from xmq.contract.subscription_record import (
    StoredSubscription,
    decode_subscription,
    encode_subscription,
)
from xmq.core.cluster_ports import (
    ClaimOutcome,
    ClaimResult,
    ClusterUnavailableError,
    NodeIdentity,
    RestoredSession,
    SubscriptionSpec,
)
from xmq.core.message import Message
from xmq.core.session import Delivery
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.redis_errors import RedisWriteFailed
from xmq.store.resp_connection import RedisReplyError

log = logging.getLogger("xmq.store.session_directory")

_OUTCOMES = {
    ScriptOutcome.CLAIMED: ClaimOutcome.CLAIMED,
    ScriptOutcome.RESTORED: ClaimOutcome.RESTORED,
    ScriptOutcome.OWNED_ELSEWHERE: ClaimOutcome.OWNED_ELSEWHERE,
    ScriptOutcome.FOREIGN: ClaimOutcome.FOREIGN,
}


def subscription_json(spec: SubscriptionSpec) -> str:
    """The stored form of one subscription (value of ``session:subs:<client id>``)."""
    return encode_subscription(
        StoredSubscription(
            spec.topic_filter,
            spec.qos,
            spec.no_local,
            spec.retain_as_published,
            spec.retain_handling,
            spec.identifier,
            spec.share_group,
        )
    )


def _subscription_spec(key: str, raw: bytes) -> SubscriptionSpec:
    stored = decode_subscription(raw)
    return SubscriptionSpec(
        key,
        stored.topic_filter,
        stored.qos,
        stored.no_local,
        stored.retain_as_published,
        stored.retain_handling,
        stored.identifier,
        stored.share_group,
    )


def delivery_from_record(raw: bytes, now: float) -> tuple[Delivery, str]:
    """A core delivery and its record id (the record bytes stay attached for the ack)."""
    record = decode_record(raw)
    message = Message(
        record.topic,
        record.payload,
        record.qos,
        record.retain,
        record.properties,
        record.origin,
        now,
    )
    delivery = Delivery(
        message, record.delivery_qos, record.delivery_retain, record.subscription_ids, None
    )
    delivery.record = raw
    return delivery, record.record_id


def restore(stored: StoredSession, now: float) -> RestoredSession:
    """Decode a stored session; records still in flight keep their packet id."""
    restored = RestoredSession()
    for key, raw in stored.subscriptions.items():
        restored.subscriptions.append(_subscription_spec(key, raw))
    for raw in stored.queue:
        try:
            delivery, record_id = delivery_from_record(raw, now)
        except RecordError:
            continue
        state = stored.inflight.get(record_id)
        if state:
            text = state.decode()
            packet_id = int(text.split(":", 1)[0])
            if packet_id not in restored.inflight:
                delivery.restore(packet_id, released=text.endswith(":r"))
                restored.inflight[packet_id] = delivery
                continue
        restored.queued.append(delivery)
    restored.inbound_qos2.update(stored.inbound_qos2)
    restored.incarnation = stored.incarnation
    restored.inbound_generations.update(stored.inbound_generations)
    return restored


class RedisSessionDirectory:
    """Claims and releases of client ids (implements ``core.cluster_ports.SessionDirectory``)."""

    def __init__(
        self,
        batcher: RedisBatcher,
        keys: ClusterKeys,
        identity: NodeIdentity,
        is_local: Callable[[str], bool],
        clock: Callable[[], float],
        release_grace_ms: int = INBOUND_RELEASE_GRACE_MS,
    ) -> None:
        self.batcher = batcher
        # what the markers of a session's open inbound QoS 2 exchanges keep when the session
        # ends (its release, or a clean start's claim)
        self.release_grace_ms = release_grace_ms
        self.keys = keys
        self.identity = identity
        self.is_local = is_local
        self.clock = clock
        self.claims = 0
        self.fenced_releases = 0  # releases refused by Redis: this run had lost its lease

    async def claim(
        self,
        client_id: str,
        *,
        clean_start: bool,
        durable: bool,
        want_state: bool,
        protocol_version: int,
        expiry_interval: int,
        expected: tuple[str, int] | None = None,
        identity: str = "",
        refuse_foreign: bool = True,
    ) -> ClaimResult:
        node = self.identity
        call = claim_session(
            self.keys,
            client_id,
            node.node_id,
            node.epoch,
            clean_start=clean_start,
            durable=durable,
            want_state=want_state,
            protocol_version=protocol_version,
            expiry_interval=expiry_interval,
            expected=expected,
            identity=identity,
            refuse_foreign=refuse_foreign,
            incarnation=(incarnation := secrets.token_hex(8)),  # a session starting now
            release_grace_ms=self.release_grace_ms,
        )
        self.claims += 1
        try:
            future = self.batcher.call_script(call.script, call.keys, call.args, ahead=True)
            async with asyncio.timeout(self.batcher.timeout_s):
                reply = await future
            parsed = ClaimReply.from_reply(reply)
        except (OSError, TimeoutError, ValueError, RedisReplyError, RedisWriteFailed) as error:
            raise ClusterUnavailableError(f"session claim failed: {error!r}") from error
        if parsed.outcome == ScriptOutcome.FENCED:
            raise ClusterUnavailableError(
                f"session claim refused: this node's lease for epoch {node.epoch} is not the"
                " current one (fenced)"
            )
        restored = None
        if parsed.stored is not None:
            restored = restore(parsed.stored, self.clock())
            incarnation = restored.incarnation
        return ClaimResult(
            _OUTCOMES[parsed.outcome],
            (parsed.owner_node, parsed.owner_epoch),
            restored,
            incarnation if durable else "",
        )

    def release(self, client_id: str) -> None:
        identity = self.identity
        epoch = identity.epoch
        call = release_session(self.keys, client_id, identity.node_id, epoch, self.release_grace_ms)

        def replied(reply: object) -> None:
            if reply == ReleaseOutcome.FENCED:
                self.fenced_releases += 1
                log.warning(
                    "release of session %r refused: this node's lease for epoch %d is not the"
                    " current one (fenced); the session is left to its next claim",
                    client_id,
                    epoch,
                )

        self.batcher.script(
            call.script,
            call.keys,
            call.args,
            callback=replied,
            guard=lambda: not self.is_local(client_id),
        )
