"""A node back from a pause acts for its sessions only once it has proven its lease — also in
its timers (real broker processes, real Redis). Its parked session's delayed will came due
while it was stopped; meanwhile the client resumed the session on another node, which cancels
the will (MQTT 5, 3.1.3.2.2). On SIGCONT the paused node's expiry wheel is overdue: it must not
publish that will before a renewal, which finds the lease gone (the node goes offline)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.support.cluster_nodes import ClusterNodes, routed
from tests.support.paho_client import PahoClient, props
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

LEASE_TTL_S = 2.0
DELAY = 3
EXPIRY = props(PacketTypes.CONNECT, SessionExpiryInterval=60)
WILL = props(PacketTypes.WILLMESSAGE, WillDelayInterval=DELAY)


@pytest.fixture
def cluster(redis_server: RedisServer, uid: str) -> Iterator[ClusterNodes]:
    nodes = ClusterNodes(redis_server, f"paused-timers-{uid}", lease_ttl_s=LEASE_TTL_S)
    try:
        nodes.start_many(2)
        yield nodes
    finally:
        nodes.stop_all()


def _client(port: int, client_id: str, topic: str, clean: bool) -> tuple[PahoClient, bool]:
    """Connected (retried while refused: a CONNECT waiting for a dead owner's lease may be
    refused with a reason to retry on), and whether the session was present."""
    deadline = time.monotonic() + 15
    while True:
        client = PahoClient(port, client_id)
        client.client.will_set(topic, client_id.encode(), qos=1, properties=WILL)
        result = client.connect(clean_start=clean, properties=EXPIRY)
        if result.reason == 0:
            return client, result.session_present
        client.close()
        assert time.monotonic() < deadline, f"CONNECT refused: {result.reason:#x}"
        time.sleep(0.2)


def test_a_node_back_from_a_pause_sends_no_will_its_session_cancelled_elsewhere(
    cluster: ClusterNodes, uid: str
) -> None:
    topic = f"{uid}/will"
    paused = cluster.nodes[1]
    # a watcher on each node: the one on node-1 sees what node-1 does on SIGCONT before the
    # renewal closes its connections; the one on node-2 what crosses the link
    near = PahoClient(cluster.port(1), f"{uid}-near")
    far = PahoClient(cluster.port(2), f"{uid}-far")
    again: PahoClient | None = None
    far.connect()
    far.subscribe(topic, 1)
    routed(cluster.port(2), cluster.port(1), topic, far)
    near.connect()
    near.subscribe(topic, 1)  # after the probes
    try:
        client, _ = _client(cluster.port(1), f"{uid}-c", topic, clean=True)
        client.drop()  # parked on node-1, its will due in DELAY s
        dropped = time.monotonic()
        time.sleep(0.5)  # node-1 reads the lost connection and parks the session
        os.kill(paused.proc.pid, signal.SIGSTOP)
        try:
            # resumed on node-2 once node-1's lease is gone: the will is cancelled
            again, present = _client(cluster.port(2), f"{uid}-c", topic, clean=False)
            assert present, "the session was not resumed on node-2"
            time.sleep(max(0.0, dropped + DELAY + 1.0 - time.monotonic()))
        finally:
            os.kill(paused.proc.pid, signal.SIGCONT)  # the will's timer is overdue now
        near.expect_none(DELAY)
        far.expect_none(0.5)
        assert paused.proc.poll() is None  # offline, not dead
    finally:
        if again is not None:
            again.close()
        near.close()
        far.close()
