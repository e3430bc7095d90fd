"""Wiring of the cluster adapters into one broker node (only when a Redis URL is configured).

Redis (``xmq.store``: ownership claims, durable sessions, group-committed through one
``RedisBatcher``) and the node links (``xmq.cluster``: membership, routes, forwarding) are
independent adapters; this module connects both to the core's ports.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from redis.exceptions import RedisError

from xmq.app.cluster_redis import check_cluster_uid
from xmq.cluster.cluster_hub import ClusterHub
from xmq.cluster.dead_peers import DeadPeers
from xmq.cluster.link_tls import link_tls_contexts
from xmq.cluster.membership import Membership
from xmq.cluster.orphan_loader import load_orphans
from xmq.cluster.peer_link import PeerLink
from xmq.cluster.peer_routes import start_wait_s, wait_for_peer_routes
from xmq.cluster.pending_owners import PendingOwners
from xmq.config import BrokerConfig
from xmq.contract.keys import ClusterKeys, split_node_id
from xmq.contract.pod import CLUSTER_UID_ENV, POD_IP_ENV, POD_UID_ENV
from xmq.contract.retained_scripts import SET_RETAINED
from xmq.contract.session_scripts import (
    APPEND_IF_OWNER,
    CLAIM_SESSION,
    FENCED_WRITES,
    FORWARDED_SEEN_TTL_MS,
    RELEASE_SESSION,
    inbound_release_grace_ms,
)
from xmq.core.broker import Broker
from xmq.core.cluster_ports import NodeIdentity
from xmq.core.held_acks import AckGate
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.redis_endpoint import (
    RedisEndpoint,
    redis_py_client,
)
from xmq.store.redis_errors import RedisStats
from xmq.store.redis_session_store import RedisSessionStore
from xmq.store.resp_connection import RedisReplyError
from xmq.store.retained_sync import RedisRetainedSync
from xmq.store.session_directory import RedisSessionDirectory

log = logging.getLogger("xmq.app.cluster")


class ClusterRuntime:
    """Membership, links, session directory and durable store of one node."""

    def __init__(self, config: BrokerConfig, broker: Broker, redis_url: str) -> None:
        self.config = config
        self.broker = broker
        cluster = config.cluster
        self.keys = ClusterKeys(cluster.name)
        self.identity = NodeIdentity(
            config.node_id, lease_ttl_s=cluster.lease_ttl_s, connect_wait_s=cluster.connect_wait_s
        )
        timeout = max(0.5, cluster.lease_ttl_s / 3)  # a busy loop reads replies late
        self.endpoint = RedisEndpoint.parse(redis_url)
        self.lease_client = redis_py_client(self.endpoint, timeout)
        persistence = config.persistence
        self.redis_stats = RedisStats()
        self.batcher = RedisBatcher(
            self.endpoint,
            timeout_s=max(1.0, cluster.lease_ttl_s / 3),
            retry_for_s=persistence.write_retry_s,
            wait_replicas=persistence.wait_replicas,
            wait_timeout_ms=persistence.wait_timeout_ms,
            stats=self.redis_stats,
            turn=broker.turn_flush,
        )
        loop_clock = broker.now
        self.store = RedisSessionStore(
            self.batcher,
            self.keys,
            self.identity,
            broker.sessions,
            loop_clock,
            config.persistence.max_queued_writes,
            # markers of forwarded records outlive any replay of them (2 x TTL + 5 s at most)
            max(FORWARDED_SEEN_TTL_MS, int((3 * cluster.lease_ttl_s + 30) * 1000)),
            # an inbound QoS 2 message's markers live while its exchange is open, then this
            release_grace := inbound_release_grace_ms(cluster.lease_ttl_s),
        )
        self.directory = RedisSessionDirectory(
            self.batcher,
            self.keys,
            self.identity,
            lambda client_id: client_id in broker.sessions,
            loop_clock,
            release_grace,
        )
        self.hub = ClusterHub(broker, self.identity, self.store)
        if cluster.link_tls is not None:
            self.hub.link_tls = link_tls_contexts(cluster.link_tls)
        self.retained = RedisRetainedSync(self.batcher, self.keys, broker.retained, loop_clock)
        self.hub.on_retained = self.retained.peer_changed
        self.hub.on_retained_written = self.retained.peer_written
        self.hub.on_link_lost = self.retained.peer_lost
        self.retained.announce = self.hub.retained_written
        hub = self.hub
        identity = self.identity

        def linked_epoch(node: str) -> int | None:
            link = hub.links.get(node)
            return None if link is None else link.peer_epoch

        async def read_owners(keys: list[str]) -> list[bytes | str | None]:
            async with asyncio.timeout(max(1.0, cluster.lease_ttl_s / 3)):
                return list(await self.lease_client.mget(keys))

        self.pending = PendingOwners(
            hub.table,
            linked_epoch,
            hub.reachable,
            read_owners,
            self.keys,
            lambda: (identity.node_id, identity.epoch),
            loop_clock,
            max(1.0, cluster.lease_ttl_s),  # each pending session's owner re-read this often
        )
        self._reload_task: asyncio.Task[None] | None = None
        self.membership: Membership | None = None
        self.dead_peers: DeadPeers | None = None  # peers killed without the operator's release
        self._peers_task: asyncio.Task[None] | None = None
        # linked node -> (its link, membership.refreshes when that link's lease was first missing)
        self._lease_missing_since: dict[str, tuple[PeerLink, int]] = {}
        self.address = ""

    async def start(self) -> str:
        """Bind the link, join the cluster, wire the ports; return the link address."""
        cluster = self.config.cluster
        split_node_id(self.identity.node_id)  # refuse ids the contract cannot carry
        self.retained.begin_load()  # retained changes arriving over links from now on are newer
        port = await self.hub.listen(cluster.link_host, cluster.link_port)
        host = cluster.advertise_host or os.environ.get(POD_IP_ENV) or cluster.link_host
        self.address = f"{host}:{port}"
        pod_name = split_node_id(self.identity.node_id)[0]
        pod_uid = os.environ.get(POD_UID_ENV) or f"local-{os.getpid()}-{int(time.time())}"
        self.membership = Membership(
            self.lease_client,
            self.keys,
            self.identity,
            pod_name,
            pod_uid,
            self.address,
            cluster.lease_ttl_s,
            self._offline,
            self._online,
            self.broker.fence,
        )
        membership = self.membership

        def peer_alive(node: str, epoch: int) -> bool:
            lease = membership.peers.get(node)
            return lease is not None and lease.epoch == epoch

        self.hub.peer_alive = peer_alive
        self.dead_peers = DeadPeers(
            self.lease_client, self.keys, cluster.lease_ttl_s, self.hub.refuses
        )
        self.hub.peer_refused = self.dead_peers.watch
        deadline = asyncio.get_running_loop().time() + 30
        cluster_uid = os.environ.get(CLUSTER_UID_ENV)
        while True:
            try:
                if cluster_uid:
                    await check_cluster_uid(self.lease_client, self.keys, cluster_uid)
                await self.membership.join()
                await self.batcher.start()
                break
            except (RedisError, OSError, TimeoutError) as error:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                log.warning("waiting for redis (%s): %r", self.endpoint.describe(), error)
                await asyncio.sleep(0.5)
        await self._load_orphans()
        scripts = (CLAIM_SESSION, RELEASE_SESSION, APPEND_IF_OWNER, SET_RETAINED, FENCED_WRITES)
        for text in scripts:
            await self.lease_client.script_load(text)  # first claims need no EVAL fallback
        broker = self.broker
        broker.identity = self.identity
        broker.directory = self.directory
        broker.cluster = self.hub
        broker.store = self.store
        if self.config.persistence.max_queued_writes == 0:
            # Publishers' PUBACK / PUBREC wait for their messages' durable records.
            broker.acks = AckGate(broker.settings.limits.receive_maximum)
        broker.retained_sync = self.retained
        self.membership.start()
        await self._link_peers()
        await self._load_retained()
        self._peers_task = asyncio.get_running_loop().create_task(
            self._peer_loop(), name="cluster-peers"
        )
        await self._wait_for_peer_routes()
        return self.address

    async def _wait_for_peer_routes(self) -> None:
        """Clients are accepted once every live peer's routes are known here, or after a
        bounded wait (``cluster.peer_routes``)."""
        membership = self.membership
        assert membership is not None
        wait_s = start_wait_s(self.config.cluster.lease_ttl_s)
        missing = await wait_for_peer_routes(
            self.hub.links,
            lambda: membership.peers,
            self.identity.node_id,
            wait_s,
            asyncio.get_running_loop().time,
        )
        if missing:
            log.warning(
                "no route snapshot from %s within %.1fs: accepting clients",
                ", ".join(sorted(missing)),
                wait_s,
            )

    async def _link_peers(self) -> None:
        assert self.membership is not None
        try:
            async with asyncio.timeout(2):
                peers = await self.membership.live_members()
        except (RedisError, OSError, TimeoutError):
            return
        self.membership.peers = peers
        self.hub.connect_peers({node: lease.address for node, lease in peers.items()})

    async def _peer_loop(self) -> None:
        interval = min(1.0, self.config.cluster.lease_ttl_s / 5)
        while True:
            await asyncio.sleep(interval)
            membership = self.membership
            if membership is None:
                continue
            peers = membership.peers
            self.hub.connect_peers({node: lease.address for node, lease in peers.items()})
            if self.hub.table.pending:
                await self._adopt_pending()
            self._close_stale_links(membership)

    def _close_stale_links(self, membership: Membership) -> None:
        """Close links to a newer run's predecessor, and to a node whose lease is gone.

        A node that stops answering without closing its links (paused, partitioned from us
        but not from its clients' view) loses its lease after ``lease_ttl_s``; dropping its
        link then makes its unconfirmed messages orphans here, appended to its persistent
        sessions in Redis, and releases the publishers' held acks that waited on it. The lease
        must be missing from a membership read begun after the link was seen up without it (a
        peer's lease exists before it links, so an older read proves nothing).
        """
        peers = membership.peers
        missing = self._lease_missing_since
        for node, link in list(self.hub.links.items()):
            lease = peers.get(node)
            if lease is not None:
                missing.pop(node, None)
                if lease.epoch > link.peer_epoch:
                    link.close()  # a newer run of that node exists: this link is stale
                continue
            seen = missing.get(node)
            if seen is None or seen[0] is not link:  # first seen missing, on this very link
                missing[node] = (link, membership.refreshes)
            elif membership.refreshes > seen[1] + 1:  # a read begun after we saw it lacks it too
                log.warning("node %s has no lease any more: closing its link", node)
                del missing[node]
                link.close()
        for node in list(missing):
            if node not in self.hub.links:
                del missing[node]

    async def _load_orphans(self) -> None:
        """Persistent sessions of dead owner runs (this node's previous run included): their
        messages published here go to their Redis queues until a node claims them."""
        try:
            async with asyncio.timeout(10):
                orphans = await load_orphans(
                    self.lease_client, self.keys, self.hub.table, self.hub.table.pending
                )
            await self._adopt_pending()
            if orphans:
                log.info("%d persistent sessions of dead owners: queued in Redis", orphans)
        except (RedisError, OSError, TimeoutError, ValueError) as error:
            log.warning("could not load orphaned sessions: %r", error)

    async def _rejoined(self) -> None:
        try:
            await self._load_orphans()
            # its links closed on going offline (a new epoch): as at start, clients wait
            # until the peers' routes are known here again (``cluster.peer_routes``)
            await self._wait_for_peer_routes()
        finally:
            self.identity.rejoining = False
        await self._load_retained()

    async def _adopt_pending(self) -> None:
        """Sessions of owners seen with a lease at start: they wait until announced, their
        owner run is gone (then orphans), or Redis names another owner (``PendingOwners``)."""
        peers = self.membership.peers if self.membership is not None else {}
        try:
            await self.pending.settle(peers)
        except (RedisError, OSError, TimeoutError, ValueError) as error:
            log.warning("could not re-check pending sessions: %r", error)

    def _offline(self) -> None:
        log.error("node %s offline", self.identity.node_id)
        self.hub.went_offline()

    def _online(self) -> None:
        log.warning("node %s back online (epoch %d)", self.identity.node_id, self.identity.epoch)
        self.hub.close_links()  # links re-form with the new epoch
        # Retained changes made while this node was offline are in Redis: read them again.
        # Its previous run's persistent sessions are orphans now (their clients were
        # disconnected): messages published here for them go to their queues, not 0x10.
        self.retained.begin_load()
        if self._reload_task is None or self._reload_task.done():
            # CONNECTs get 0x88 until the orphans are loaded and the peers' routes known
            self.identity.rejoining = True
            self._reload_task = asyncio.get_running_loop().create_task(
                self._rejoined(), name="rejoin-reload"
            )

    async def _load_retained(self) -> None:
        try:
            async with asyncio.timeout(30):
                loaded = await self.retained.load(self.endpoint, self.batcher.timeout_s)
            log.info("%d retained messages loaded from redis", loaded)
        except (OSError, TimeoutError, ValueError, RedisReplyError) as error:
            log.warning("could not load retained messages: %r", error)

    async def stop(self) -> None:
        """Graceful stop: flush records, drop the lease (sessions become claimable at once)."""
        if self._peers_task is not None:
            self._peers_task.cancel()
        if self._reload_task is not None:
            self._reload_task.cancel()
        try:
            async with asyncio.timeout(5):
                await self.batcher.flush()
        except TimeoutError:
            log.warning("durable records still unwritten at shutdown")
        await self.hub.stop()
        if self.dead_peers is not None:
            self.dead_peers.stop()
        if self.membership is not None:
            await self.membership.leave()
        batcher = self.batcher
        log.info(
            "redis batcher: %d pipelines, %d commands, %d claims, %d records, %d failures, "
            "%d retried, %d given up",
            batcher.pipelines,
            batcher.commands,
            self.directory.claims,
            self.store.records,
            batcher.failures,
            batcher.resent,
            self.redis_stats.given_up,
        )
        await self.batcher.close()
        await self.lease_client.aclose()
