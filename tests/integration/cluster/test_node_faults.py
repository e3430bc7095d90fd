"""Node faults under persistent QoS 1 / QoS 2 load: nothing acknowledged is lost, no QoS 2 copy.

Real ``xmq serve`` nodes on a real Redis, real paho-mqtt clients with persistent sessions
(``tests.support.paho_fault_load``): per node and QoS one subscriber and one publisher, so
messages cross every link; every acknowledged message is counted at every subscriber of its
QoS. Lease TTL 2 s keeps each fault short.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from tests.support.cluster_nodes import ClusterNodes, wait_for
from tests.support.paho_fault_load import FaultLoad
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration


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


def test_a_node_paused_longer_than_its_lease_acts_on_nothing_it_buffered(
    nodes: ClusterNodes, uid: str
) -> None:
    """SIGSTOP node 3 for 2.5 lease TTLs while every node's clients publish, then SIGCONT.

    Meanwhile its lease expires, its clients move to the other nodes and claim their sessions,
    and the other nodes close their links to it and append what it never confirmed. Woken up,
    it holds the client bytes and link frames its kernel buffered during the pause, finds its
    lease gone and goes offline without routing, recording or acknowledging any of them.
    """
    victim = nodes.nodes[3]
    load = FaultLoad([nodes.port(i) for i in (1, 2, 3)], uid)
    try:
        load.start()
        time.sleep(2.0)
        os.kill(victim.proc.pid, signal.SIGSTOP)
        time.sleep(2.5 * nodes.lease_ttl_s)
        os.kill(victim.proc.pid, signal.SIGCONT)
        time.sleep(4.0)  # it goes offline, rejoins under a new epoch, serves again
        load.stop_publishing()
        result = load.count()
    finally:
        load.close()
    print(result)
    log = victim.log()
    assert "going offline" in log, log[-3000:]
    assert result.acknowledged > 500, result
    assert result.missing == 0, result
    assert result.qos2_duplicates == 0, result


def test_a_paused_node_that_keeps_its_lease_resumes_its_buffered_reads(
    nodes: ClusterNodes, uid: str
) -> None:
    """A pause shorter than the lease (0.6 TTL) loses nothing and costs no offline period."""
    victim = nodes.nodes[3]
    load = FaultLoad([nodes.port(i) for i in (1, 2, 3)], uid)
    try:
        load.start()
        time.sleep(1.5)
        os.kill(victim.proc.pid, signal.SIGSTOP)
        time.sleep(0.6 * nodes.lease_ttl_s)
        os.kill(victim.proc.pid, signal.SIGCONT)
        time.sleep(2.0)
        load.stop_publishing()
        result = load.count()
    finally:
        load.close()
    print(result)
    wait_for(lambda: victim.proc.poll() is None, 1, "victim alive")
    assert result.acknowledged > 300, result
    assert result.missing == 0, result
    assert result.qos2_duplicates == 0, result
