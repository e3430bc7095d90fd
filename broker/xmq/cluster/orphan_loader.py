"""At start (and rejoining): learn the persistent sessions whose owner is already dead, from Redis.

A node learns other nodes' persistent subscriptions over the links; a node that starts after
an owner died (or the restarted owner itself, under its new epoch) reads them here instead:
every session in a member's ``node:sessions`` set or in ``sessions:orphaned`` whose owner
record names a run without a lease becomes an orphan of the route table, so messages
published here for it are appended to its Redis queue until a node claims it. Its shared
subscriptions go to ``shared_orphans``: a group with no live member queues for it.
"""

from __future__ import annotations

import logging

import redis.asyncio as aioredis

from xmq.cluster.route_table import (
    NO_LOCAL,
    RETAIN_AS_PUBLISHED,
    OrphanSub,
    PendingOrphans,
    RouteTable,
)
from xmq.contract.keys import ClusterKeys
from xmq.contract.records import NodeLease, SessionOwner
from xmq.contract.subscription_record import decode_subscription

__all__ = ["PendingOrphans", "load_orphans"]

log = logging.getLogger("xmq.cluster.orphans")

MAX_SESSIONS = 100_000


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def load_orphans(
    client: aioredis.Redis,
    keys: ClusterKeys,
    table: RouteTable,
    pending: dict[tuple[str, int], PendingOrphans],
) -> int:
    """Add every dead owner's persistent subscriptions to ``table.orphans``; return sessions.

    Sessions of an owner whose lease is still there go to ``pending`` (keyed by owner), unless
    a linked node has announced them already: they wait there until a node announces them,
    and the caller orphans them once that owner proves unreachable or its lease goes
    (``PendingOwners``).
    """
    members = [_text(m) for m in await client.smembers(keys.members())]
    epochs: dict[str, int] = {}
    addresses: dict[str, str] = {}
    candidates: set[str] = {_text(c) for c in await client.smembers(keys.orphaned_sessions())}
    for node in members:
        raw = await client.get(keys.lease(node))
        if raw is not None:
            lease = NodeLease.from_json(raw)
            epochs[node] = lease.epoch
            addresses[node] = lease.address
        candidates.update(_text(c) for c in await client.smembers(keys.node_sessions(node)))
        if len(candidates) > MAX_SESSIONS:
            log.warning("more than %d persistent sessions: orphans not preloaded", MAX_SESSIONS)
            return 0
    loaded = 0
    for client_id in candidates:
        raw_owner = await client.get(keys.session_owner(client_id))
        if raw_owner is None:
            continue
        owner = SessionOwner.from_json(raw_owner)
        key = (owner.node_id, owner.epoch)
        target = table.orphans
        shared = table.shared_orphans
        if epochs.get(owner.node_id) == owner.epoch:  # a lease: alive, or killed just now
            if any(sessions.get(client_id) for sessions in table.durable.values()):
                continue  # a node linked meanwhile announced it: its routes take its messages
            if key not in pending:
                pending[key] = PendingOrphans(addresses[owner.node_id])
            target = pending[key].index
            shared = pending[key].shared
        subs = await client.hgetall(keys.session_subscriptions(client_id))
        for raw_sub in subs.values():
            try:
                sub = decode_subscription(raw_sub)
            except (ValueError, KeyError):
                continue
            flags = (NO_LOCAL if sub.no_local else 0) | (
                RETAIN_AS_PUBLISHED if sub.retain_as_published else 0
            )
            orphan = OrphanSub(key, sub.qos, flags)
            if sub.share_group is not None:
                shared.add(client_id, sub.share_group, sub.topic_filter, orphan)
            else:
                target.add(client_id, sub.topic_filter, orphan)
        loaded += 1
    return loaded
