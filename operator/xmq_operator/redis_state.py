"""What the operator reads from and does to a cluster's Redis (synchronous client)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
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

TAKE_OVER_NAMESPACE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
"""
"""Replace the recorded cluster UID ARGV[1] by ARGV[2] (compare-and-set)."""


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
        self._take_over = client.register_script(TAKE_OVER_NAMESPACE)

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

    def claim(self, cluster_uid: str) -> str:
        """Record ``cluster_uid`` as the namespace's owner unless one is; the recorded UID."""
        key = self.keys.cluster_uid()
        self._client.set(key, cluster_uid, nx=True)
        return str(self._client.get(key) or "")

    def recorded_uid(self) -> str | None:
        """The UID recorded as the namespace's owner, if any."""
        value = self._client.get(self.keys.cluster_uid())
        return None if value is None else str(value)

    def take_over(self, old_uid: str, cluster_uid: str) -> bool:
        """Replace the recorded owner ``old_uid`` by ``cluster_uid`` (False if it changed)."""
        done = self._take_over(keys=[self.keys.cluster_uid()], args=[old_uid, cluster_uid])
        return bool(done)

    def ensure_owner(
        self, cluster_uid: str, known_uids: Callable[[], set[str] | None]
    ) -> str | None:
        """None when the key namespace is (now) recorded for ``cluster_uid``; else the owner.

        Another recorded UID is taken over only when ``known_uids()`` (the XmqClusters the
        operator can see; None: unknown) does not hold it and no lease in the namespace is
        alive: a deleted and re-created XmqCluster gets its namespace back, a live cluster
        elsewhere (another Kubernetes cluster sharing the Redis) never loses it.
        """
        recorded = self.claim(cluster_uid)
        if recorded == cluster_uid:
            return None
        known = known_uids()
        gone = known is not None and recorded not in known and not self.snapshot().leases
        if gone and self.take_over(recorded, cluster_uid):
            logger.warning(
                "cluster %s in Redis: taken over from the gone XmqCluster UID %s",
                self.keys.cluster,
                recorded,
            )
            return None
        return recorded

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
