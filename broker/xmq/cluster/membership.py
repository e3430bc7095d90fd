"""Membership: run epoch, the lease renewed every ttl/5, offline when it cannot be renewed.

Start: ``INCR node:epoch`` -> ``SET node:lease PX ttl`` -> ``SADD members``. The lease is
renewed with ``SET ... XX PX ttl``; when the key is gone (expired while Redis was away or the
node was paused, or cleared by the operator) or no renewal begun in the last 90 % of the TTL
succeeded, the node goes offline (its clients are disconnected, CONNECT gets 0x88) and rejoins
under a new epoch once Redis answers. Each success moves the ``LeaseFence`` deadline; a read
that finds it passed wakes the loop to renew at once (``core.lease_fence``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from xmq.contract.keys import ClusterKeys
from xmq.contract.records import NodeLease
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.lease_fence import FENCE_MARGIN, LeaseFence

log = logging.getLogger("xmq.cluster.membership")


def describe(error: BaseException) -> str:
    """An error with its kind (``TimeoutError()`` alone says nothing)."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class Membership:
    """Holds this node's lease and lists the live members."""

    def __init__(
        self,
        client: aioredis.Redis,
        keys: ClusterKeys,
        identity: NodeIdentity,
        pod_name: str,
        pod_uid: str,
        address: str,
        ttl_s: float,
        on_offline: Callable[[], None],
        on_online: Callable[[], None],
        fence: LeaseFence | None = None,
    ) -> None:
        self.client = client
        self.keys = keys
        self.identity = identity
        self.pod_name = pod_name
        self.pod_uid = pod_uid
        self.address = address
        self.ttl_s = ttl_s
        self.on_offline = on_offline
        self.on_online = on_online
        self.started_at = time.time()
        self.last_renewed = 0.0  # loop time the last successful renewal (or join) began
        self.fence = fence if fence is not None else LeaseFence()
        self.fence.watch(self.revalidate)
        self._wake = asyncio.Event()
        self.peers: dict[str, NodeLease] = {}
        self.refreshes = 0  # how many times ``peers`` was read from Redis
        self.lease_losses = 0  # times this node went offline (its lease lost)
        self.redis_errors = 0  # lease rounds that failed on Redis (error or timeout)
        self._task: asyncio.Task[None] | None = None

    def _lease(self) -> str:
        identity = self.identity
        return NodeLease(
            node_id=identity.node_id,
            pod_name=self.pod_name,
            pod_uid=self.pod_uid,
            address=self.address,
            epoch=identity.epoch,
            started_at=self.started_at,
        ).to_json()

    async def join(self) -> None:
        """Take a new epoch and a lease (raises when Redis does not answer)."""
        identity = self.identity
        started = asyncio.get_running_loop().time()
        async with asyncio.timeout(self.ttl_s):
            identity.epoch = int(await self.client.incr(self.keys.node_epoch(identity.node_id)))
            ttl_ms = int(self.ttl_s * 1000)
            await self.client.set(self.keys.lease(identity.node_id), self._lease(), px=ttl_ms)
            await self.client.sadd(self.keys.members(), identity.node_id)
        self.last_renewed = started
        identity.online = True
        self.fence.proven(started, self.ttl_s)
        log.info("node %s joined with epoch %d", identity.node_id, identity.epoch)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="lease")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.ttl_s / 5
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._wake.wait()  # a read found the lease unproven: renew now
            self._wake.clear()
            identity = self.identity
            try:
                if identity.online:
                    await self._renew(interval)
                else:
                    await self.join()
                    self.on_online()
                await self._refresh_peers(interval)
            except (RedisError, OSError, TimeoutError) as error:
                self.redis_errors += 1
                age = loop.time() - self.last_renewed
                if identity.online and age >= self.ttl_s * (1.0 - FENCE_MARGIN):
                    log.error(
                        "lease not renewed for %.1fs (lease TTL %.1fs; last error: %s): going"
                        " offline",
                        age,
                        self.ttl_s,
                        describe(error),
                    )
                    self._go_offline()

    def revalidate(self) -> None:
        """Renew the lease now (a read found it unproven: after a pause, or Redis slow)."""
        self._wake.set()

    async def _renew(self, interval: float) -> None:
        identity = self.identity
        started = asyncio.get_running_loop().time()
        async with asyncio.timeout(max(interval, self.ttl_s / 3)):
            renewed = await self.client.set(
                self.keys.lease(identity.node_id), self._lease(), px=int(self.ttl_s * 1000), xx=True
            )
        if not renewed:
            log.error(
                "lease of %s is gone (expired: last renewal began %.1fs ago, TTL %.1fs; or"
                " cleared by the operator): going offline",
                identity.node_id,
                started - self.last_renewed,
                self.ttl_s,
            )
            self._go_offline()
            return
        self.last_renewed = started
        self.fence.proven(started, self.ttl_s)

    def _go_offline(self) -> None:
        if self.identity.online:
            self.identity.online = False
            self.lease_losses += 1
            self.fence.expire()  # nothing read acts before the links and clients are closed
            self.on_offline()
            self.fence.lift()  # offline: no sessions here; CONNECT is answered 0x88

    async def _refresh_peers(self, interval: float) -> None:
        async with asyncio.timeout(interval):
            self.peers = await self.live_members()
        self.refreshes += 1

    async def live_members(self) -> dict[str, NodeLease]:
        """node id -> lease of every member whose lease is present."""
        members = sorted(
            m.decode() if isinstance(m, bytes) else str(m)
            for m in await self.client.smembers(self.keys.members())
        )
        if not members:
            return {}
        raw = await self.client.mget([self.keys.lease(m) for m in members])
        leases: dict[str, NodeLease] = {}
        for node, value in zip(members, raw, strict=True):
            if value is not None:
                leases[node] = NodeLease.from_json(value)
        return leases

    async def leave(self) -> None:
        """Graceful stop: drop the lease (only our own epoch's) and the membership."""
        if self._task is not None:
            self._task.cancel()
        identity = self.identity
        if not identity.online:
            return
        identity.online = False
        try:
            async with asyncio.timeout(2):
                raw = await self.client.get(self.keys.lease(identity.node_id))
                if raw is not None and NodeLease.from_json(raw).epoch == identity.epoch:
                    await self.client.delete(self.keys.lease(identity.node_id))
                await self.client.srem(self.keys.members(), identity.node_id)
        except (RedisError, OSError, TimeoutError) as error:
            log.warning("could not drop the lease: %s", error)
