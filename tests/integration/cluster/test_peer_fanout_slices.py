"""Fan-outs that come from another node are routed a slice per loop turn: two real nodes and
real Redis; a publisher on node-1 sends QoS 1 messages in one write to thousands of persistent
sessions on node-2. node-2 keeps answering another client's PINGREQ meanwhile, every session
gets every message (its Redis queue), an online subscriber gets them in order, and each
PUBACK (held until node-2 confirms the records of every slice) says success. A link reset
while node-2 fans out is resumed without a second copy of the frame in progress."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time

import pytest

from bench.abuse_clients import park_sessions
from tests.integration.broker.test_bounded_work import MAX_STALL_S, _ping_time
from tests.integration.cluster.test_node_faults import _reset_link
from tests.support.cluster_nodes import ClusterNodes
from tests.support.http_probe import metric, wait_port
from tests.support.raw_client import RawClient, connected, subscribed
from tests.support.redis_server import RedisServer
from xmq.codec.packets import Puback, Publish
from xmq.codec.writer import encode
from xmq.contract import ClusterKeys

pytestmark = pytest.mark.integration

SESSIONS = 3000
MESSAGES = 20


def _route_spread(pub: RawClient, watcher: RawClient, topic: str) -> None:
    """QoS 0 probes from node-1 until node-2's subscriber gets one (its route has spread)."""
    deadline = time.monotonic() + 15
    while True:
        assert time.monotonic() < deadline, "the route did not spread"
        pub.send_packet(Publish(topic, b"probe"))
        with contextlib.suppress(TimeoutError):
            if isinstance(watcher.read_packet(timeout=0.2), Publish):
                break
    while not watcher.read_nothing(0.3):  # late probes
        watcher.read_packet(1)


def _fan_out_ready(nodes: ClusterNodes, uid: str) -> tuple[RawClient, RawClient, RawClient, bytes]:
    """Two nodes; ``SESSIONS`` offline persistent sessions and an online watcher on node-2
    (on ``bcast/#``), a pinger there and a publisher on node-1 once the route has spread:
    (watcher, pinger, publisher, the flood of ``MESSAGES`` QoS 1 PUBLISH in one write)."""
    nodes.start_many(2)
    parked = asyncio.run(park_sessions(nodes.port(2), f"{uid}-off-", f"{uid}/bcast/#", SESSIONS))
    assert parked == {0: SESSIONS}
    watcher = connected(nodes.port(2), f"{uid}-watcher")
    subscribed(watcher, f"{uid}/bcast/#", 1)
    pinger = connected(nodes.port(2), f"{uid}-pinger")
    pub = connected(nodes.port(1), f"{uid}-pub")
    _route_spread(pub, watcher, f"{uid}/bcast/probe")
    flood = b"".join(
        encode(Publish(f"{uid}/bcast/x", b"%d" % n, qos=1, packet_id=n), 5)
        for n in range(1, MESSAGES + 1)
    )
    return watcher, pinger, pub, flood


def _queue_lengths(redis_server: RedisServer, nodes: ClusterNodes, uid: str) -> list[int]:
    """The Redis queue length of each parked session."""
    client = redis_server.client()
    try:
        keys = ClusterKeys(nodes.cluster)
        pipe = client.pipeline(transaction=False)
        for n in range(SESSIONS):
            pipe.llen(keys.session_queue(f"{uid}-off-{n}"))
        return [int(length) for length in pipe.execute()]
    finally:
        client.close()


def _payloads(watcher: RawClient) -> list[bytes]:
    got = [watcher.read_packet(30) for _ in range(MESSAGES)]
    return [p.payload for p in got if isinstance(p, Publish)]


def test_a_fan_out_from_another_node_leaves_it_answering_pings(
    redis_server: RedisServer, uid: str
) -> None:
    nodes = ClusterNodes(redis_server, f"fan-{uid}", metrics=True)
    try:
        watcher, pinger, pub, flood = _fan_out_ready(nodes, uid)
        port = wait_port(nodes.nodes[2], "metrics")
        routed_before = metric(port, "xmq_deliveries_routed_total")
        pub.send(flood)  # one write: node-1 forwards the frames together
        pings: list[float] = []  # answered by node-2 before the last PUBACK
        acks: list[tuple[int, int]] = []
        while len(acks) < MESSAGES:
            if pub.read_nothing(0.001):
                pings.append(_ping_time(pinger))
                continue
            packet = pub.read_packet(60)
            assert isinstance(packet, Puback), packet
            acks.append((packet.packet_id, packet.reason_code))
        assert acks == [(n, 0) for n in range(1, MESSAGES + 1)]  # after every slice's records
        assert _payloads(watcher) == [b"%d" % n for n in range(1, MESSAGES + 1)]
        assert len(pings) >= 3  # the whole fan-out in one turn answered none meanwhile
        assert max(pings) < MAX_STALL_S
        routed = metric(port, "xmq_deliveries_routed_total") - routed_before
        assert routed >= SESSIONS * MESSAGES
        # every session has every message
        assert _queue_lengths(redis_server, nodes, uid) == [MESSAGES] * SESSIONS
        for client_ in (watcher, pinger, pub):
            client_.close()
    finally:
        nodes.stop_all()


def test_a_link_reset_during_a_fan_out_from_another_node_duplicates_nothing(
    redis_server: RedisServer, uid: str
) -> None:
    """``ss -K`` of the node-1 -> node-2 link once node-1 has the first PUBACK (node-2 is
    fanning out the next frames): the link is resumed, node-2's RESUME counts the frame in
    progress, so node-1 does not send it again; every PUBACK says success, every session has
    each message once (its Redis queue), the online watcher gets each once, in order."""
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) missing")
    nodes = ClusterNodes(redis_server, f"fanr-{uid}")
    try:
        watcher, pinger, pub, flood = _fan_out_ready(nodes, uid)
        link_port = nodes.link_address(2)[1]
        pub.send(flood)
        first = pub.read_packet(60)
        assert isinstance(first, Puback) and first.packet_id == 1, first
        _reset_link(link_port)
        acks = [(first.packet_id, first.reason_code)]
        while len(acks) < MESSAGES:
            packet = pub.read_packet(60)
            assert isinstance(packet, Puback), packet
            acks.append((packet.packet_id, packet.reason_code))
        assert acks == [(n, 0) for n in range(1, MESSAGES + 1)]
        assert _payloads(watcher) == [b"%d" % n for n in range(1, MESSAGES + 1)]
        assert watcher.read_nothing(1.0)  # no second copy
        lengths = _queue_lengths(redis_server, nodes, uid)
        assert {length: lengths.count(length) for length in lengths} == {MESSAGES: SESSIONS}
        logs = nodes.nodes[1].log() + nodes.nodes[2].log()
        assert "re-established: resuming" in logs, logs[-3000:]
        assert "given up" not in logs, logs[-3000:]
        for client_ in (watcher, pinger, pub):
            client_.close()
    finally:
        nodes.stop_all()
