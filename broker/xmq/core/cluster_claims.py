"""Claiming a client id cluster-wide on CONNECT, and restoring a stored session.

The common case is one ``CLAIM_SESSION`` round trip (batched with the other connects of the
same loop tick). When a live node owns the session, it is asked over the node link to close
the client (0x8E) and hand the session over; the claim is then repeated, expecting that owner.
An owner that cannot be reached is waited out until its lease expires, for at most
``cluster.connect_wait_s``; then CONNACK 0x88 (Server unavailable), which clients retry.
The claim carries the connecting identity: a session another identity holds is refused by the
script before anything changes (:class:`ForeignSessionError`), so its client is never asked to
hand it over.
"""

from __future__ import annotations

import asyncio
from itertools import chain
from typing import TYPE_CHECKING

from xmq.core.cluster_ports import (
    ClaimOutcome,
    ClusterUnavailableError,
    ForeignSessionError,
    RestoredSession,
)
from xmq.core.inbound_ids import InboundMessageIds
from xmq.core.session import Session, Subscription

if TYPE_CHECKING:
    from xmq.core.broker import Broker
    from xmq.protocol.connect_terms import ConnectTerms

_MAX_ROUNDS = 6


async def claim_cluster_wide(
    broker: Broker, terms: ConnectTerms, identity_name: str = "", refuse_foreign: bool = True
) -> RestoredSession | None:
    """Make this node the owner of ``terms.client_id``; return the stored session, if any.

    ``identity_name``: who connects (``core.session_access.identity_of``); raises
    :class:`ForeignSessionError` when another identity holds the session (``refuse_foreign``).
    """
    identity = broker.identity
    directory = broker.directory
    if identity is None or directory is None:
        return None
    if not identity.online:
        raise ClusterUnavailableError("node offline: no cluster lease")
    if identity.rejoining:
        raise ClusterUnavailableError(
            "node rejoining: loading its previous run's sessions and its peers' routes"
        )
    client_id = terms.client_id
    durable = terms.session_expiry_s > 0
    expected: tuple[str, int] | None = None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + identity.connect_wait_s
    rounds = 0
    while True:
        local = broker.sessions.get(client_id)
        claiming = broker.claiming
        claiming[client_id] = claiming.get(client_id, 0) + 1
        try:
            result = await directory.claim(
                client_id,
                clean_start=terms.clean_start,
                durable=durable,
                want_state=not terms.clean_start and local is None,
                protocol_version=terms.protocol_version,
                expiry_interval=terms.session_expiry_s,
                expected=expected,
                identity=identity_name,
                refuse_foreign=refuse_foreign,
            )
        finally:  # runs right before the caller attaches (no await in between)
            revoked = client_id in broker.revoked_claims
            left = claiming[client_id] - 1
            if left:
                claiming[client_id] = left
            else:
                del claiming[client_id]
                broker.revoked_claims.discard(client_id)
        if not identity.online:
            raise ClusterUnavailableError("node went offline")
        if revoked:
            # Another node took the session over (TAKEOVER) while this claim's reply was on its
            # way: the takeover is the later event, so this connection does not get it.
            raise ClusterUnavailableError("session taken over by another node during the claim")
        if result.outcome == ClaimOutcome.FOREIGN:
            raise ForeignSessionError(f"client id {client_id!r} is another user's session")
        if result.outcome != ClaimOutcome.OWNED_ELSEWHERE:
            fresh = result.restored is None and result.incarnation
            if fresh and terms.clean_start:  # a durable session starts (replacing any)
                return RestoredSession(incarnation=result.incarnation, stored=False)
            if broker.sessions.get(client_id) is not None:
                return None  # the in-memory session is newer than any stored copy
            if fresh:  # a durable session starts
                return RestoredSession(incarnation=result.incarnation, stored=False)
            return result.restored
        rounds += 1
        cluster = broker.cluster
        handed_over = False
        if cluster is not None and rounds < _MAX_ROUNDS:
            handed_over = await cluster.request_takeover(result.owner, client_id, terms.clean_start)
        if handed_over:
            expected = result.owner
            continue
        expected = None
        if loop.time() >= deadline:
            raise ClusterUnavailableError(
                f"session owned by node {result.owner[0]} (epoch {result.owner[1]}), not reachable"
                f" within {identity.connect_wait_s:.1f}s (its lease has not expired): retry"
            )
        await asyncio.sleep(max(0.05, identity.lease_ttl_s / 10))


def apply_restored(broker: Broker, session: Session, restored: RestoredSession) -> None:
    """Fill a fresh session from its stored copy (subscriptions, deliveries, QoS 2 ids)."""
    for spec in restored.subscriptions:
        sub = Subscription(
            session,
            spec.topic_filter,
            spec.qos,
            spec.no_local,
            spec.retain_as_published,
            spec.retain_handling,
            spec.identifier,
            spec.share_group,
        )
        broker.subscribe(session, sub)
    for packet_id, delivery in restored.inflight.items():
        session.inflight[packet_id] = delivery  # in flight under its id (``restore``)
    for delivery in restored.queued:
        session.queue_restored(delivery)
    if restored.inbound_qos2:
        session.inbound_for_update().update(restored.inbound_qos2)
    if restored.incarnation:  # its inbound QoS 2 messages' ids, the same on every node
        session.inbound_ids = InboundMessageIds(
            restored.incarnation, dict(restored.inbound_generations), restored.inbound_qos2
        )
    store = session.store
    if store is not None:  # the forwarded ones among them count as recorded here
        store.restored(session, chain(restored.inflight.values(), restored.queued))
