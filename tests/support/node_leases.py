"""Node leases written straight into a test's Redis: the fencing token a claim, release or
append is checked against (what ``cluster.membership`` writes for a running node)."""

from __future__ import annotations

import redis

from xmq.contract import ClusterKeys, NodeLease


def write_lease(
    client: redis.Redis, keys: ClusterKeys, node: str, epoch: int, ttl_ms: int = 60_000
) -> None:
    """``node``'s run ``epoch`` holds its lease (replacing any other run's)."""
    lease = NodeLease(
        node_id=node, pod_name="p", pod_uid="u", address="127.0.0.1:1", epoch=epoch, started_at=0
    )
    client.set(keys.lease(node), lease.to_json(), px=ttl_ms)


def drop_lease(client: redis.Redis, keys: ClusterKeys, node: str) -> None:
    """``node``'s lease is gone (expired: the node died or was paused past its TTL)."""
    client.delete(keys.lease(node))
