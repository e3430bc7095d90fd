"""What the operator reads from and does to a cluster's Redis (synchronous client)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import redis
from pydantic import ValidationError

from xmq.contract import (
    RELEASE_DEAD_NODE,
    CleanupResult,
    ClusterKeys,
    NodeLease,
    release_dead_node,
)

logger = logging.getLogger(__name__)

RedisUnavailableError = (redis.ConnectionError, redis.TimeoutError)


@dataclass(frozen=True, slots=True)
class LeaseSnapshot:
    """Members and the leases they hold, read in one round trip each."""

    members: frozenset[str]
    leases: tuple[NodeLease, ...]

    @property
    def alive(self) -> list[str]:
        return sorted(lease.node_id for lease in self.leases)


class ClusterRedis:
    """One XMQ cluster's keys in one Redis."""

    def __init__(self, client: redis.Redis, keys: ClusterKeys) -> None:
        self._client = client
        self.keys = keys
        self._release = client.register_script(RELEASE_DEAD_NODE)

    def snapshot(self) -> LeaseSnapshot:
        """The member index and every member's lease (malformed leases are logged, skipped)."""
        members = frozenset(str(item) for item in self._client.smembers(self.keys.members()))
        ordered: Sequence[str] = sorted(members)
        raw = (
            self._client.mget([self.keys.lease(node_id) for node_id in ordered]) if ordered else []
        )
        leases: list[NodeLease] = []
        for node_id, value in zip(ordered, raw, strict=True):
            if value is None:
                continue
            try:
                leases.append(NodeLease.from_json(value))
            except ValidationError:
                logger.warning("malformed lease of node %s in Redis: ignored", node_id)
        return LeaseSnapshot(members, tuple(leases))

    def release(self, node_id: str, pod_uid: str, epoch: int | None) -> CleanupResult:
        """Run the contract's compare-and-delete for one node of a dead pod."""
        call = release_dead_node(self.keys, node_id, pod_uid, epoch)
        reply = self._release(keys=list(call.keys), args=list(call.args))
        return CleanupResult.from_reply(reply)


class RedisPool:
    """One client per Redis URL, shared by the handler threads."""

    def __init__(self, timeout: float = 3.0) -> None:
        self._timeout = timeout
        self._clients: dict[str, redis.Redis] = {}
        self._lock = threading.Lock()

    def cluster(self, url: str, cluster_name: str) -> ClusterRedis:
        with self._lock:
            client = self._clients.get(url)
            if client is None:
                client = redis.Redis.from_url(
                    url,
                    decode_responses=True,
                    socket_timeout=self._timeout,
                    socket_connect_timeout=self._timeout,
                )
                self._clients[url] = client
        return ClusterRedis(client, ClusterKeys(cluster_name))

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
