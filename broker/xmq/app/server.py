"""Composition root of one broker node: config -> core + adapters, signals, shutdown."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable

from pydantic import ValidationError

from xmq import __version__
from xmq.app.cluster_metrics import cluster_metric_sources
from xmq.app.cluster_redis import redis_url_of
from xmq.app.cluster_runtime import ClusterRuntime
from xmq.app.node_endpoint import NodeEndpoint, cluster_member_check, database_check
from xmq.app.preflight import StartupError, check_startup
from xmq.app.redis_metrics import RedisCollector
from xmq.app.supervisor import Supervisor, follow_supervisor
from xmq.app.worker_plan import worker_config, worker_count, worker_index
from xmq.auth.file_accounts import AccountsFileError, FileAccounts
from xmq.auth.postgres_accounts import PostgresAccounts, PostgresAccountsConfig
from xmq.codec.reason_codes import ReasonCode
from xmq.config import BrokerConfig, load_config
from xmq.core.auth_ports import (
    AllowAll,
    AnonymousAuthenticator,
    Authenticator,
    AuthEvents,
    Authorizer,
)
from xmq.core.broker import Broker
from xmq.core.session import QueueLimits
from xmq.core.settings import CoreSettings
from xmq.core.sys_topics import SysPublisher
from xmq.net.listeners import ListenerSet, ListenerStartError
from xmq.observability.log_format import apply_logging
from xmq.protocol.connect_terms import ServerLimits

log = logging.getLogger("xmq.app")


def core_settings(config: BrokerConfig) -> CoreSettings:
    """Translate the configuration into the core's plain settings."""
    mqtt = config.mqtt
    limits = config.limits
    return CoreSettings(
        node_id=config.node_id,
        limits=ServerLimits(
            max_packet_size=mqtt.max_packet_size,
            receive_maximum=mqtt.receive_maximum,
            max_keepalive_s=mqtt.max_keepalive_s,
            topic_alias_maximum=mqtt.topic_alias_maximum,
            maximum_qos=mqtt.maximum_qos,
            retain_available=mqtt.retain_available,
            max_session_expiry_s=mqtt.max_session_expiry_s,
            max_client_id_length=mqtt.max_client_id_length,
        ),
        queues=QueueLimits(
            limits.max_queued_messages,
            limits.max_queued_bytes,
            limits.memory_budget_bytes,
            limits.max_inflight_messages,
        ),
        max_topic_length=mqtt.max_topic_length,
        max_topic_levels=mqtt.max_topic_levels,
        max_subscriptions_per_client=mqtt.max_subscriptions_per_client,
        max_sessions=limits.max_sessions,
        max_persistent_sessions=limits.max_persistent_sessions,
        max_retained_messages=limits.max_retained_messages,
        max_retained_bytes=limits.max_retained_bytes,
        max_write_buffer_bytes=limits.max_write_buffer_bytes,
        sys_interval_s=config.sys.interval_s,
        foreign_session=config.auth.foreign_session,
        version=__version__,
    )


def build_auth(
    config: BrokerConfig, events: AuthEvents
) -> tuple[Authenticator, Authorizer, PostgresAccounts | None]:
    """PostgreSQL when a DSN is configured, else the accounts file, else anonymous access."""
    auth = config.auth
    if auth.postgres_dsn is not None:
        store = PostgresAccounts(
            PostgresAccountsConfig(
                auth.postgres_dsn,
                cache_ttl=auth.cache_ttl_s,
                allow_anonymous=auth.allow_anonymous,
                acl_no_match_allows=auth.acl_no_match == "allow",
                migrate=auth.migrate_on_start,
            ),
            events,
        )
        return store, store, store
    if auth.accounts_file is not None:
        accounts = FileAccounts.load(auth.accounts_file)
        return accounts, accounts, None
    return AnonymousAuthenticator(auth.allow_anonymous), AllowAll(), None


class BrokerNode:
    """One running broker process: the core, its listeners and its periodic jobs."""

    def __init__(self, config: BrokerConfig, worker: int | None = None) -> None:
        self.config = config
        self.worker = worker  # index when a supervisor runs this node (SO_REUSEPORT)
        self.broker = Broker(core_settings(config))
        authenticator, authorizer, self.account_store = build_auth(config, self.broker)
        self.accounts_file = authenticator if isinstance(authenticator, FileAccounts) else None
        self.listeners = ListenerSet(
            self.broker,
            authenticator,
            authorizer,
            config.mqtt.max_packet_size,
            config.limits.max_connections,
            reuse_port=worker is not None,
        )
        self.sys = SysPublisher(self.broker, config.sys.interval_s)
        self.stopping = asyncio.Event()
        self.draining = False
        redis_url = redis_url_of(config)
        self.cluster = ClusterRuntime(config, self.broker, redis_url) if redis_url else None
        self.endpoint = NodeEndpoint(
            config.metrics, self.broker, self.listeners, lambda: self.draining, self.drain
        )
        if self.account_store is not None:
            self.endpoint.readiness.add(
                "postgresql", database_check(self.account_store, "postgresql")
            )
        if self.cluster is not None:
            cluster = self.cluster
            self.endpoint.readiness.add(
                "cluster",
                cluster_member_check(lambda: cluster.identity.online, cluster.lease_client.ping),
            )
            self.endpoint.sources.extend(cluster_metric_sources(cluster))
            self.endpoint.endpoint.registry.register(RedisCollector(cluster.batcher, self.broker))

    async def start(self) -> None:
        if self.account_store is not None:  # a database that is down is retried by the store
            await self.account_store.start()
        if self.cluster is not None:  # join the cluster before accepting clients
            address = await self.cluster.start()
            identity = self.cluster.identity
            print(
                f"xmq: cluster {identity.node_id} epoch {identity.epoch} link {address}",
                flush=True,
            )
        try:
            await self.listeners.start(self.config.listeners)
        except ListenerStartError as error:
            raise StartupError(str(error)) from error
        self.sys.start()
        for bound in self.listeners.bound:
            # One line per listener on stdout: scripts and tests read the resolved ports.
            print(
                f"xmq: listening {bound.name} {bound.protocol} {bound.host}:{bound.port}",
                flush=True,
            )
        try:
            metrics = await self.endpoint.start()
        except OSError as error:
            where = f"{self.config.metrics.host}:{self.config.metrics.port}"
            raise StartupError(f"metrics.port: {where}: {error}") from error
        if metrics is not None:
            print(f"xmq: listening metrics http {metrics[0]}:{metrics[1]}", flush=True)
        if self.worker is not None:
            self._print_worker(metrics)

    def _print_worker(self, metrics: tuple[str, int] | None) -> None:
        """One line per worker naming everything it bound (lines of workers interleave)."""
        listening = " ".join(f"{b.name} {b.host}:{b.port}" for b in self.listeners.bound)
        http = f"{metrics[0]}:{metrics[1]}" if metrics is not None else "-"
        link = self.cluster.address if self.cluster is not None else "-"
        print(
            f"xmq: worker {self.worker} node {self.config.node_id} pid {os.getpid()} "
            f"link {link} metrics {http} {listening}",
            flush=True,
        )

    async def drain(self, server_reference: str | None = None) -> int:
        """Stop accepting and move clients away (0x9C + Server Reference, else 0x8B); keep
        running (readiness fails) until SIGTERM. Returns the number of clients disconnected."""
        self.draining = True
        self.listeners.stop_accepting()
        reference = server_reference or self.config.shutdown.server_reference
        log.info("draining (server reference %s)", reference)
        return self._disconnect_all(reference, "draining")

    def _disconnect_all(self, reference: str | None, reason: str) -> int:
        """DISCONNECT every client (0x9C + reference, else 0x8B); refuse CONNECTs in progress."""
        connections = list(self.broker.connections)
        for conn in connections:
            if reference:
                conn.close_with(ReasonCode.USE_ANOTHER_SERVER, reason, reference)
            else:
                conn.close_with(ReasonCode.SERVER_SHUTTING_DOWN, reason)
        for client in list(self.listeners.clients):  # still authenticating: CONNACK 0x88
            if client.conn not in self.broker.connections:
                client.conn.close_with(ReasonCode.SERVER_UNAVAILABLE, reason)
        return len(connections)

    async def shutdown(self, grace_s: float | None = None) -> None:
        """Stop accepting, tell MQTT 5 clients the server is shutting down, flush, close.

        Everything happens within ``grace_s``: the clients get it less a share kept for
        leaving the cluster (records flushed, lease dropped), then are aborted; each later
        step is cut short at the deadline (a Redis that stopped answering cannot hold the
        process). ``run`` also arms a watchdog for the rest (``SHUTDOWN_OVERRUN_S``)."""
        if grace_s is None:
            grace_s = self.config.shutdown.grace_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        self.listeners.stop_accepting()
        self.sys.stop()
        reference = self.config.shutdown.server_reference if self.draining else None
        self._disconnect_all(reference, "draining" if reference else "server shutting down")
        reserve = min(CLUSTER_STOP_SHARE_S, grace_s / 2) if self.cluster is not None else 0.0
        try:
            async with asyncio.timeout_at(deadline - reserve):
                await self.listeners.idle.wait()
        except TimeoutError:
            for client in list(self.listeners.clients):
                client.abort()
        if self.cluster is not None:
            await _before(deadline, "leaving the cluster", self.cluster.stop)
        if self.account_store is not None:
            await _before(deadline, "closing the account store", self.account_store.close)
        await _before(deadline, "closing the HTTP endpoint", self.endpoint.stop)

    config_path: str | None = None
    """The YAML file the node was started with (re-read on SIGHUP for the log settings)."""

    def reload(self) -> None:
        """SIGHUP: reload TLS certificates and the accounts file now; re-read the log level
        and format."""
        if self.accounts_file is not None:
            try:  # removed or disabled users are disconnected, changed rules re-applied
                self.accounts_file.reload(self.broker)
                log.warning("SIGHUP: accounts file %s reloaded", self.accounts_file.path)
            except AccountsFileError as error:
                log.error("SIGHUP: accounts file not reloaded (the old one stays): %s", error)
        count = self.listeners.reload_certificates()
        link_tls = self.cluster.hub.link_tls if self.cluster is not None else None
        if link_tls is not None:
            count += link_tls.reload()
        log.info("SIGHUP: %d certificate contexts reloaded", count)
        if self.config_path is None:
            return
        try:
            fresh = load_config(self.config_path)
        except (ValidationError, OSError) as error:
            log.error("SIGHUP: %s not reloaded: %s", self.config_path, error)
            return
        apply_logging(fresh.log.level, fresh.log.json_format)
        log.warning("SIGHUP: log level %s, json %s", fresh.log.level, fresh.log.json_format)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(FULL_COLLECTION_INTERVAL_S, _full_collection, loop)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.stopping.set)
        loop.add_signal_handler(signal.SIGHUP, self.reload)
        supervisor = follow_supervisor()
        if supervisor is not None:
            loop.call_later(1.0, self._watch_supervisor, loop, supervisor)
        starting = asyncio.ensure_future(self.start())
        signalled = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait((starting, signalled), return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():  # SIGTERM while starting (waiting for Redis, say)
            log.info("stopped while starting")
            starting.cancel()
            await asyncio.wait((starting,))
        elif (failure := starting.exception()) is not None:
            signalled.cancel()
            await self.shutdown(0)  # leave the cluster, close what did start
            raise failure
        await signalled
        log.info("shutting down")
        _arm_watchdog(self.config.shutdown.grace_s + SHUTDOWN_OVERRUN_S)
        await self.shutdown()

    def _watch_supervisor(self, loop: asyncio.AbstractEventLoop, supervisor: int) -> None:
        if os.getppid() != supervisor:
            log.error("supervisor %d is gone: stopping", supervisor)
            self.stopping.set()
            return
        loop.call_later(1.0, self._watch_supervisor, loop, supervisor)


CLUSTER_STOP_SHARE_S = 3.0
"""Of ``shutdown.grace_s`` (at most half of it), the seconds kept after the clients for
leaving the cluster: unwritten records flushed, node links closed, the lease dropped."""
SHUTDOWN_OVERRUN_S = 2.0
"""After SIGTERM the process exits within ``grace_s`` plus this, whatever still runs (a
task that ignores cancellation, a thread in the default executor): the watchdog ends it."""
_STEP_MINIMUM_S = 0.1


async def _before(deadline: float, what: str, step: Callable[[], Awaitable[None]]) -> None:
    """Run one shutdown step, cut short at ``deadline`` (with a moment to start at all)."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout_at(max(deadline, loop.time() + _STEP_MINIMUM_S)):
            await step()
    except TimeoutError:
        log.warning("shutdown: %s cut short at the end of shutdown.grace_s", what)
    except Exception as error:  # e.g. stopped half-way through the start: go on stopping
        log.warning("shutdown: %s failed: %s: %s", what, type(error).__name__, error)


def _arm_watchdog(after_s: float) -> None:
    """End the process ``after_s`` from now if it has not exited by itself."""

    def overran() -> None:
        log.error("shutdown took longer than shutdown.grace_s + %gs: exiting", SHUTDOWN_OVERRUN_S)
        logging.shutdown()
        os._exit(1)

    timer = threading.Timer(after_s, overran)
    timer.daemon = True
    timer.start()


def configure_logging(config: BrokerConfig) -> None:
    apply_logging(config.log.level, config.log.json_format)


def serve(config: BrokerConfig, config_path: str | None = None) -> int:
    """Run one broker node until SIGTERM/SIGINT (or supervise ``workers`` node processes)."""
    configure_logging(config)
    worker = worker_index()
    if worker is None:  # a worker's supervisor checked all this (and holds the ports)
        check_startup(config)  # StartupError: one line naming the field and file or address
        count = worker_count(config)
        if count > 1:
            return Supervisor(config, config_path, count).run()
    else:
        config = worker_config(config, worker)
        apply_logging(config.log.level, config.log.json_format, node=config.node_id)
    if config.use_uvloop:
        import uvloop

        uvloop.install()
    tune_garbage_collector()
    node_coro = _run_node(config, config_path, worker)
    asyncio.run(node_coro)
    return 0


def tune_garbage_collector() -> None:
    """Keep the cyclic collector from pausing the event loop for long.

    Everything loaded at start (modules, config, pydantic schemas) is moved out of the
    collector's sight with ``gc.freeze``, and full collections, which walk every live object,
    practically never happen on their own (threshold 1000 for the oldest generation): with
    10,000 connections each one stalled the loop for 100-250 ms (connect p99 200 ms; with
    these settings 14 ms). ``BrokerNode`` runs a full collection every
    ``FULL_COLLECTION_INTERVAL_S`` instead, so cyclic garbage is still reclaimed.

    The young generations stay small (10,000 allocations, then every 4th): a young collection
    walks every object allocated since the last one that is still alive, and a flood that
    queues millions of deliveries keeps them all alive. With (100,000, 20) one collection of
    the middle generation walked 2 M queued deliveries and stalled the loop for 1.2 s (3,000
    messages to 2,000 offline sessions on a loaded 2-core machine); with (20,000, 5) the
    longest was 0.07 s, with (10,000, 3) 0.02-0.04 s, for the same total time (1,000 messages
    to 2,000 offline sessions: 0.5-1.3 s of collections either way). The oldest generation's
    threshold counts middle collections: 3,000 keeps it as rare as before.

    A full collection walks every tracked object (~0.15-0.25 us each). Queued deliveries are
    not objects (``core.delivery_queue`` keeps them as words in an array), so with the default
    512 MiB budget full of a fan-out (16.6 M deliveries to 2,000 offline sessions) one takes
    ~2 ms; each queued *message* is still one tracked object: full of distinct messages
    (770,000) ~120 ms (``bench/gc_pause_bench.py``, docs/security.md).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 3, 3000)


FULL_COLLECTION_INTERVAL_S = 300.0


def _full_collection(loop: asyncio.AbstractEventLoop) -> None:
    gc.collect()
    loop.call_later(FULL_COLLECTION_INTERVAL_S, _full_collection, loop)


async def _run_node(
    config: BrokerConfig, config_path: str | None = None, worker: int | None = None
) -> None:
    node = BrokerNode(config, worker)
    node.config_path = config_path
    await node.run()
