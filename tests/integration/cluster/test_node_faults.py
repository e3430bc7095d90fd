"""Node faults under persistent QoS 1 / QoS 2 load: nothing acknowledged is lost, no QoS 2 copy.

Real ``xmq serve`` nodes on a real Redis, real paho-mqtt clients with persistent sessions
counted by the independent checker (``tests.support.fault_checker``): per node and QoS one
publisher and one subscriber (three in the drain test) on one topic per QoS, so messages cross
every link; every message a publisher got a successful PUBACK / PUBCOMP for is counted at every
subscriber of its QoS. Lease TTL 2 s keeps each fault short; a 3 s keepalive moves a client off
a paused node within seconds.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes, wait_for
from tests.support.fault_checker import (
    DeliveryLedger,
    Fleet,
    LedgerReport,
    load_with_fault,
    node_fleet,
    pause_process,
    settle_and_check,
)
from tests.support.http_probe import http, wait_port
from tests.support.paho_client import PahoClient, props
from tests.support.redis_server import RedisServer
from xmq.contract import ClusterKeys, NodeLease

pytestmark = pytest.mark.integration

EXPIRY = props(PacketTypes.CONNECT, SessionExpiryInterval=3600)
RATE = 90.0  # messages/s over the six publishers (15 each)
KEEPALIVE_S = 3


@pytest.fixture
def nodes(redis_server: RedisServer, uid: str) -> Iterator[ClusterNodes]:
    cluster = ClusterNodes(redis_server, f"faults-{uid}")
    try:
        cluster.start_many(3)
        yield cluster
    finally:
        for process in cluster.nodes.values():
            if process.proc.poll() is None:
                os.kill(process.proc.pid, signal.SIGCONT)
        cluster.stop_all()


def _under_load(
    nodes: ClusterNodes,
    order: tuple[int, ...],
    uid: str,
    fault: Callable[[], None],
    rate: float = RATE,
    subscribers: int = 1,
) -> tuple[DeliveryLedger, Fleet]:
    """Start the checked load (node ``order[n]``'s clients dial it first), run ``fault`` while
    it publishes, stop publishing and wait until every publish is acknowledged; the fleet
    stays connected (``settle_and_check`` stops it)."""
    ledger = DeliveryLedger()
    ports = [nodes.port(i) for i in order]
    fleet = node_fleet(ledger, ports, f"fault/{uid}", subscribers, keepalive=KEEPALIVE_S)
    load_with_fault(ledger, fleet, rate, fault)
    return ledger, fleet


def _check(
    nodes: ClusterNodes, ledger: DeliveryLedger, fleet: Fleet, min_acked: int
) -> LedgerReport:
    """Every acknowledged message at every subscriber of its QoS, no QoS 2 copy."""
    logs = lambda: {f"node-{i}": n.log() for i, n in nodes.nodes.items()}  # noqa: E731
    return settle_and_check(ledger, fleet, logs, min_acked=min_acked, timeout=40)


def _paused_under_load(
    nodes: ClusterNodes, uid: str, pause_s: float, after_s: float, min_acked: int
) -> LedgerReport:
    """SIGSTOP node 3 for ``pause_s`` under the load, SIGCONT, go on ``after_s``, check."""

    def fault() -> None:
        time.sleep(2.0)
        pause_process(nodes.nodes[3].proc.pid, pause_s)
        time.sleep(after_s)

    return _check(nodes, *_under_load(nodes, (1, 2, 3), uid, fault), min_acked)


def test_a_node_paused_longer_than_its_lease_acts_on_nothing_it_buffered(
    nodes: ClusterNodes, uid: str
) -> None:
    """SIGSTOP node 3 for 2.5 lease TTLs while every node's clients publish, then SIGCONT.

    Meanwhile its lease expires, its clients move to the other nodes and claim their sessions,
    and the other nodes close their links to it and append what it never confirmed. Woken up,
    it holds the client bytes and link frames its kernel buffered during the pause, finds its
    lease gone and goes offline without routing, recording or acknowledging any of them.
    """
    # then it goes offline, rejoins under a new epoch, serves again
    _paused_under_load(nodes, uid, 2.5 * nodes.lease_ttl_s, 4.0, min_acked=500)
    log = nodes.nodes[3].log()
    assert "going offline" in log, log[-3000:]


def test_a_paused_node_that_keeps_its_lease_resumes_its_buffered_reads(
    nodes: ClusterNodes, uid: str
) -> None:
    """A pause shorter than the lease (0.6 TTL) loses nothing and costs no offline period."""
    _paused_under_load(nodes, uid, 0.6 * nodes.lease_ttl_s, 2.0, min_acked=300)
    assert nodes.nodes[3].proc.poll() is None


def _reset_link(port: int) -> None:
    """Abort the dialling side of the link to ``port`` (the other side gets a RST)."""
    subprocess.run(
        ["ss", "-K", "dst", "127.0.0.1", "dport", "=", str(port)],
        check=False,
        capture_output=True,
    )


def _queued(redis_server: RedisServer, cluster: str, client_ids: list[str]) -> int:
    keys = ClusterKeys(cluster)
    client = redis_server.client()
    try:
        return sum(int(client.llen(keys.session_queue(c))) for c in client_ids)
    finally:
        client.close()


def test_a_reset_link_between_two_live_nodes_loses_and_strands_nothing(
    nodes: ClusterNodes, redis_server: RedisServer, uid: str
) -> None:
    """Reset the node-1 -> node-2 link three times under load (``ss -K``, a RST both ways).

    Both nodes keep their leases: the link is dialled again and what node 2 had not confirmed
    is sent again on the new link. No message goes to the Redis queue of a session that is
    attached and live on node 2, where it would wait until its subscriber moved.
    """
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) missing")
    port = nodes.link_address(2)[1]

    def fault() -> None:
        for _ in range(3):
            time.sleep(1.5)
            _reset_link(port)
        time.sleep(2.0)

    ledger, fleet = _under_load(nodes, (1, 2, 3), uid, fault)
    try:
        ledger.wait_delivered(timeout=20)
        subscribers = [sub.client_id for sub in fleet.subscribers]
        deadline = time.monotonic() + 5.0  # the last PUBACKs' LREMs are on their way
        while (stranded := _queued(redis_server, nodes.cluster, subscribers)) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.2)
        reconnects = sum(sub.connects - 1 for sub in fleet.subscribers)
        reasons = [dict(sub.disconnect_reasons) for sub in fleet.subscribers]
    finally:
        result = _check(nodes, ledger, fleet, min_acked=500)
    logs = nodes.nodes[1].log() + nodes.nodes[2].log()
    assert "re-established: resuming" in logs, logs[-3000:]
    assert "given up" not in logs, logs[-3000:]
    print(result, f"stranded {stranded}, subscriber reconnects {reconnects}")
    assert reconnects == 0, (reconnects, reasons)
    assert stranded == 0, f"{stranded} records left in queues of live sessions; {result}"


def test_a_node_back_online_queues_messages_for_its_previous_run_s_sessions(
    nodes: ClusterNodes, redis_server: RedisServer, uid: str
) -> None:
    """Node 3 loses its lease (cleared, as after a Redis outage) and rejoins under a new epoch:
    its clients were disconnected and its sessions forgotten. A publisher back on node 3 before
    the subscriber gets PUBACK 0x00, not 0x10, and the subscriber finds every message."""
    port = nodes.port(3)
    topic = f"rejoin/{uid}"
    sub = PahoClient(port, f"{uid}-sub")
    sub.connect(clean_start=True, properties=EXPIRY)
    sub.subscribe(topic, 1)
    client = redis_server.client()
    lease_key = ClusterKeys(nodes.cluster).lease("node-3")
    old = NodeLease.from_json(client.get(lease_key) or b"")
    client.delete(lease_key)
    assert sub.disconnects.get(timeout=10).reason == 0x89  # offline: every client closed
    sub.close()
    wait_for(
        lambda: (
            (raw := client.get(lease_key)) is not None
            and NodeLease.from_json(raw).epoch > old.epoch
        ),
        10,
        "node 3 back under a new epoch",
    )
    client.close()
    # Until its previous run's sessions are loaded the node answers CONNECT 0x88 (retried):
    # a publish accepted before that would find no route for them.
    pub = _accepted_client(port, f"{uid}-pub")
    try:
        reasons = [pub.publish(topic, f"{n}".encode(), qos=1, wait=True) for n in range(20)]
    finally:
        pub.close()
    assert reasons == [0] * 20  # not 0x10 "no matching subscribers"
    again = PahoClient(port, f"{uid}-sub")
    try:
        assert again.connect(clean_start=False, properties=EXPIRY).session_present
        got = sorted(int(m.payload) for m in again.expect(20, timeout=15))
    finally:
        again.close()
    assert got == list(range(20))


def _accepted_client(port: int, client_id: str, timeout: float = 10.0) -> PahoClient:
    """A client connected to ``port``, a new one per attempt while CONNECT is refused (0x88)."""
    deadline = time.monotonic() + timeout
    while True:
        client = PahoClient(port, client_id)
        result = client.connect(timeout=5)
        if result.reason == 0:
            return client
        client.close()
        assert result.reason == 0x88, f"CONNECT refused with {result.reason:#x}"
        assert time.monotonic() < deadline, "CONNECT still refused"
        time.sleep(0.05)


@pytest.fixture
def drainable(redis_server: RedisServer, uid: str) -> Iterator[ClusterNodes]:
    """Three nodes; node 3 serves ``/admin/drain`` (its HTTP endpoint on)."""
    cluster = ClusterNodes(redis_server, f"drain-{uid}")
    try:
        cluster.start(1)
        cluster.start(2)
        cluster.start(3, env={"XMQ_METRICS__ENABLED": "true"})
        cluster.wait_linked(3)
        yield cluster
    finally:
        cluster.stop_all()


def test_a_drained_node_hands_every_session_over_with_nothing_lost(
    drainable: ClusterNodes, uid: str
) -> None:
    """``xmq drain`` of node 3 under load: its clients are sent away (0x8B), reconnect to the
    other nodes and take their sessions over from it while every node's publishers go on."""
    nodes = drainable
    http_port = wait_port(nodes.nodes[3], "metrics")
    status, metrics = http(http_port, "/metrics")
    assert status == 200
    for line in (
        'xmq_cluster_membership{state="online"} 1.0',
        'xmq_cluster_link_up{peer="node-1"} 1.0',
        'xmq_cluster_link_up{peer="node-2"} 1.0',
        'xmq_cluster_takeovers_total{kind="handed_over"} 0.0',
        "xmq_cluster_lease_age_seconds{node=",
    ):
        assert line in metrics, metrics

    def fault() -> None:
        time.sleep(2.0)
        drain = subprocess.run(
            [sys.executable, "-m", "xmq", "drain", "--url", f"http://127.0.0.1:{http_port}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert drain.returncode == 0, drain.stderr
        time.sleep(4.0)

    # node 3's clients dial it first; 10 msg/s per publisher, three subscribers per node and QoS
    ledger, fleet = _under_load(nodes, (3, 1, 2), uid, fault, rate=60.0, subscribers=3)
    result = _check(nodes, ledger, fleet, min_acked=300)
    moved = sum(sub.connects - 1 for sub in fleet.subscribers)
    print(result, f"subscriber reconnects {moved}")
    assert moved >= 6, result  # node 3's subscribers moved
    handed_over = http(http_port, "/metrics")[1]
    assert 'xmq_cluster_takeovers_total{kind="handed_over"} 0.0' not in handed_over


def test_a_connect_waiting_for_an_unreachable_owner_is_refused_before_client_timeouts(
    redis_server: RedisServer, uid: str
) -> None:
    """The session's owner is paused (its 10 s lease still valid): a CONNECT for it on another
    node gets CONNACK 0x88 after ``cluster.connect_wait_s`` (2 s here), long before the common
    10 s client timeout, instead of waiting the lease out; the client retries later."""
    cluster = ClusterNodes(redis_server, f"wait-{uid}", lease_ttl_s=10.0)
    try:
        for index in (1, 2):
            cluster.start(index, env={"XMQ_CLUSTER__CONNECT_WAIT_S": "2"})
        cluster.wait_linked(2)
        owner = PahoClient(cluster.port(2), f"{uid}-c")
        owner.connect(clean_start=True, properties=EXPIRY)
        os.kill(cluster.nodes[2].proc.pid, signal.SIGSTOP)
        try:
            again = PahoClient(cluster.port(1), f"{uid}-c")
            started = time.monotonic()
            result = again.connect(clean_start=False, properties=EXPIRY, timeout=15)
            waited = time.monotonic() - started
            again.close()
        finally:
            os.kill(cluster.nodes[2].proc.pid, signal.SIGCONT)
        owner.close()
    finally:
        cluster.stop_all()
    assert result.reason == 0x88, result
    assert 1.5 < waited < 8.0, waited


def test_the_same_client_id_on_two_nodes_at_once_leaves_one_live_connection(
    nodes: ClusterNodes, uid: str
) -> None:
    """20 rounds: one client id connects to node 1 and node 2 at the same instant. Exactly one
    connection stays; the other is closed with DISCONNECT 0x8E (session taken over)."""
    problems: list[str] = []
    for round_no in range(20):
        client_id = f"{uid}-twin-{round_no}"
        clients = [PahoClient(nodes.port(i), client_id) for i in (1, 2)]
        barrier = threading.Barrier(2)
        results: list[object] = [None, None]

        def connect(
            index: int,
            client: PahoClient,
            barrier: threading.Barrier = barrier,
            results: list[object] = results,
        ) -> None:
            barrier.wait()
            results[index] = client.connect(clean_start=False, properties=EXPIRY, timeout=15)

        threads = [threading.Thread(target=connect, args=(i, c)) for i, c in enumerate(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
        time.sleep(1.0)  # a late takeover has arrived by now
        live = [
            c
            for c, r in zip(clients, results, strict=True)
            if getattr(r, "reason", 1) == 0 and c.disconnects.empty()
        ]
        closed = [c.disconnects.get().reason for c in clients if not c.disconnects.empty()]
        if len(live) != 1 or any(reason != 0x8E for reason in closed):
            problems.append(f"round {round_no}: {len(live)} live, disconnects {closed}")
        for client in clients:
            client.close()
    assert problems == [], problems
