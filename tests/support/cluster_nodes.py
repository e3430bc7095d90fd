"""Start several real broker processes forming one cluster around a test Redis."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable

from tests.support.broker_process import BrokerProcess
from tests.support.paho_client import PahoClient
from tests.support.redis_server import RedisServer
from xmq.contract import ClusterKeys, NodeLease, release_dead_node

LEASE_TTL_S = 2.0


def clear_dead_lease(redis_server: RedisServer, cluster: str, node_id: str) -> None:
    """What the operator does for a dead pod: compare-and-delete its lease at once."""
    keys = ClusterKeys(cluster)
    client = redis_server.client()
    try:
        lease = NodeLease.from_json(client.get(keys.lease(node_id)) or b"")
        call = release_dead_node(keys, node_id, lease.pod_uid, lease.epoch)
        client.eval(call.script, len(call.keys), *call.keys, *call.args)
    finally:
        client.close()


def wait_for_lease(redis_server: RedisServer, cluster: str, node_id: str) -> None:
    """Wait (10 s at most) until the node has its lease: it has joined the cluster."""
    client = redis_server.client()
    try:
        deadline = time.monotonic() + 10
        while not client.exists(ClusterKeys(cluster).lease(node_id)):
            assert time.monotonic() < deadline, f"{node_id} holds no lease"
            time.sleep(0.05)
    finally:
        client.close()


def node_yaml(
    redis_url: str,
    cluster: str,
    lease_ttl_s: float,
    max_queued_writes: int,
    metrics: bool = False,
    persistence: str = "",
    link_host: str = "127.0.0.1",
) -> str:
    """A node's config; ``link_host``: the address its cluster link listens on; ``metrics``:
    serve /metrics on a free loopback port (``ports``);
    ``persistence``: more lines of the persistence section (e.g. ``  wait_replicas: 1\n``)."""
    endpoint = (
        "  enabled: true\n  host: 127.0.0.1\n  port: 0\n" if metrics else "  enabled: false\n"
    )
    return (
        "cluster:\n"
        f"  redis_url: {redis_url}\n"
        f"  name: {cluster}\n"
        f"  lease_ttl_s: {lease_ttl_s}\n"
        f"  link_host: {link_host}\n"
        "  link_port: 0\n"
        "persistence:\n"
        f"  max_queued_writes: {max_queued_writes}\n"
        f"{persistence}"
        "metrics:\n"
        f"{endpoint}"
        "log:\n"
        "  level: WARNING\n"
    )


class ClusterNodes:
    """Broker processes ``node-1`` ... ``node-N`` of one cluster (index from 1)."""

    def __init__(
        self,
        redis: RedisServer,
        cluster: str,
        lease_ttl_s: float = LEASE_TTL_S,
        max_queued_writes: int = 0,
        metrics: bool = False,
        extra_yaml: str = "",
        url: str | None = None,
        persistence: str = "",
    ) -> None:
        """``extra_yaml``: more configuration sections for every node (``auth:`` ...); ``url``:
        what the nodes are given (default: ``redis.url``; e.g. a Sentinel URL, with ``redis``
        the master at start)."""
        self.extra_yaml = extra_yaml
        self.redis = redis
        self.metrics = metrics
        self.cluster = cluster
        self.lease_ttl_s = lease_ttl_s
        self.max_queued_writes = max_queued_writes
        self.url = url or redis.url
        self.persistence = persistence
        self.nodes: dict[int, BrokerProcess] = {}
        self._all: list[BrokerProcess] = []

    def place(self, index: int) -> tuple[str, tuple[str, ...]]:
        """Node ``index``'s address (its listener and link) and the argv it runs under
        (loopback, none; a subclass may put each node in a network namespace)."""
        return "127.0.0.1", ()

    def start(self, index: int, env: dict[str, str] | None = None) -> BrokerProcess:
        host, wrapper = self.place(index)
        yaml = node_yaml(
            self.url,
            self.cluster,
            self.lease_ttl_s,
            self.max_queued_writes,
            self.metrics,
            self.persistence,
            link_host=host,
        )
        yaml += self.extra_yaml
        process = BrokerProcess(
            yaml,
            env={"XMQ_NODE_ID": f"node-{index}", **(env or {})},
            host=host,
            wrapper=wrapper,
        )
        self.nodes[index] = process
        self._all.append(process)
        return process

    def start_many(self, count: int) -> None:
        for index in range(1, count + 1):
            self.start(index)
        self.wait_linked(count)

    def port(self, index: int) -> int:
        return self.nodes[index].port

    def wait_linked(self, count: int, timeout: float = 10.0) -> None:
        """Wait until every running node holds a lease (links form within a second after)."""
        client = self.redis.client()
        try:
            deadline = time.monotonic() + timeout
            pattern = f"xmq:v1:{{{self.cluster}}}:node:lease:*"
            while len(list(client.scan_iter(pattern))) < count:
                if time.monotonic() > deadline:
                    raise TimeoutError("nodes did not join")
                time.sleep(0.05)
        finally:
            client.close()
        time.sleep(1.5)

    def link_address(self, index: int) -> tuple[str, int]:
        """The link address ``node-<index>`` advertises in its lease (what its peers dial)."""
        client = self.redis.client()
        try:
            raw = client.get(ClusterKeys(self.cluster).lease(f"node-{index}"))
        finally:
            client.close()
        assert raw is not None, f"node-{index} holds no lease"
        host, _, port = NodeLease.from_json(raw).address.rpartition(":")
        return host, int(port)

    def logs(self) -> dict[str, str]:
        """Each running node's log (stderr), by ``node-<index>``."""
        return {f"node-{index}": node.log() for index, node in self.nodes.items()}

    def log_tails(self, lines: int = 80) -> dict[str, str]:
        """The last ``lines`` of the log of every node this test started (killed and stopped
        ones too, while their logs exist), by node id and pid: a failed test's report shows
        them (``tests/conftest.py``)."""
        return {
            f"{process.name} (pid {process.proc.pid})": process.log_tail(lines)
            for process in self._all
        }

    def kill(self, index: int) -> None:
        self.nodes.pop(index).kill()

    def stop_all(self) -> None:
        for process in self._all:
            process.stop()


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def routed(sub_port: int, pub_port: int, topic: str, subscriber: PahoClient) -> None:
    """Publish probes from ``pub_port`` until the subscriber sees one (routes have spread)."""
    probe = PahoClient(pub_port, "")
    probe.connect()
    try:
        deadline = time.monotonic() + 10
        while True:
            probe.publish(topic, b"probe", qos=0)
            try:
                subscriber.expect(1, timeout=0.2)
                break
            except (TimeoutError, queue.Empty):
                if time.monotonic() > deadline:
                    raise
    finally:
        probe.disconnect()
    while True:  # drain late probes
        try:
            subscriber.expect_none(0.2)
            return
        except AssertionError:
            continue
