"""A peer killed without the operator's release: its lease is released once two signals agree.

A run killed with its lease still valid keeps that lease until its TTL runs out, and until then
nothing is appended to its persistent sessions' queues (``APPEND_IF_OWNER`` refuses a live
owner): the publishers' held acknowledgements wait. From outside, a kill looks like a pause or a
partition except for two signs, and only both together are taken as death:

* its link port **refuses** connections (``ECONNREFUSED``: nothing listens — a paused process
  still accepts, a partition times out); and
* its lease **has not been renewed** for two renewal intervals (``PTTL`` of ``node:lease``
  at most ``ttl - 2 x ttl/5 - margin``): a node cut off from its peers by a rejecting
  firewall still renews its lease.

Then this node runs the operator's compare-and-delete (``RELEASE_DEAD_NODE``, matching the
run's pod UID and epoch): the run's sessions become orphans and their messages are appended at
once. Were the run alive after all, it is fenced right away (its claims, records and appends
carry its lease epoch) and goes offline at its next renewal, its clients resuming elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from xmq.contract.keys import ClusterKeys
from xmq.contract.records import NodeLease
from xmq.contract.scripts import CleanupOutcome, CleanupResult, release_dead_node

log = logging.getLogger("xmq.cluster.dead_peers")

RENEWALS_MISSED = 2
MARGIN_S = 0.25


class DeadPeers:
    """Watches peers whose link was given up because their port refused connections."""

    def __init__(
        self,
        client: aioredis.Redis,
        keys: ClusterKeys,
        ttl_s: float,
        refused: Callable[[str], Awaitable[bool]],
    ) -> None:
        self.client = client
        self.keys = keys
        self.ttl_s = ttl_s
        self.refused = refused  # whether an address refuses connections (not a timeout)
        self.released = 0
        self._watching: dict[tuple[str, int], asyncio.Task[None]] = {}

    @property
    def silent_after_s(self) -> float:
        """How long a lease must have gone unrenewed: two renewal intervals and a margin."""
        return RENEWALS_MISSED * self.ttl_s / 5 + MARGIN_S

    def watch(self, node: str, epoch: int, address: str) -> None:
        """``node``'s run ``epoch`` stopped answering and its port refused: watch its lease."""
        key = (node, epoch)
        if key in self._watching:
            return
        task = asyncio.get_running_loop().create_task(self._watch(node, epoch, address))
        self._watching[key] = task
        task.add_done_callback(lambda _: self._watching.pop(key, None))

    def stop(self) -> None:
        for task in list(self._watching.values()):
            task.cancel()

    async def _watch(self, node: str, epoch: int, address: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ttl_s + 1.0  # by then the lease has expired anyway
        lease_key = self.keys.lease(node)
        while loop.time() < deadline:
            try:
                async with asyncio.timeout(max(0.5, self.ttl_s / 5)):
                    raw, pttl = await self._read(lease_key)
                if raw is None:
                    return  # expired or released: nothing to do
                lease = NodeLease.from_json(raw)
                if lease.epoch != epoch:
                    return  # a newer run: that one is judged on its own
                if not await self.refused(address):
                    return  # something listens again: not the dead process
                unrenewed_s = self.ttl_s - pttl / 1000
                if unrenewed_s >= self.silent_after_s:
                    await self._release(node, lease, unrenewed_s)
                    return
            except (RedisError, OSError, TimeoutError, ValueError) as error:
                log.debug("dead peer %s: %r", node, error)
            await asyncio.sleep(min(0.2, self.ttl_s / 10))

    async def _read(self, lease_key: str) -> tuple[bytes | None, int]:
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.get(lease_key)
            pipe.pttl(lease_key)
            raw, pttl = await pipe.execute()
        return raw, int(pttl)

    async def _release(self, node: str, lease: NodeLease, unrenewed_s: float) -> None:
        call = release_dead_node(self.keys, node, lease.pod_uid, lease.epoch)
        reply = await self.client.eval(call.script, len(call.keys), *call.keys, *call.args)
        result = CleanupResult.from_reply(reply)
        if result.outcome == CleanupOutcome.LEASE_DELETED:
            self.released += 1
            log.warning(
                "node %s (epoch %d) is dead: its link port refuses connections and its lease"
                " was not renewed for %.1fs; lease released (%d sessions orphaned)",
                node,
                lease.epoch,
                unrenewed_s,
                result.sessions_orphaned,
            )
