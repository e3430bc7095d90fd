"""Network partitions under persistent QoS 1 / QoS 2 load: nothing acknowledged is lost, no QoS 2
copy.

Redis and three ``xmq serve`` nodes each run in a network namespace of their own, joined by a
bridge (``tests.support.namespace_network``; root, ``ip`` and ``nft``); the test's paho clients
reach every node over a veth. A partition is an ``nft`` table in one node's namespace that
drops every packet to or from some of the others, silently: established connections go
half-open, as in a real network fault. Per node and QoS one publisher and one subscriber share
one topic per QoS, so messages cross every link; the independent checker
(``tests.support.fault_checker``) counts every message a publisher got a successful PUBACK /
PUBCOMP for at every subscriber of its QoS.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import uvloop

from tests.support.fault_checker import (
    DeliveryLedger,
    LedgerReport,
    load_with_fault,
    node_fleet,
    settle_and_check,
)
from tests.support.namespace_network import NamespacedNodes, namespaced_cluster
from xmq.bench.survivability import SurvivabilityOptions, run_survivability
from xmq.bench.survivability_faults import FaultOptions
from xmq.bench.survivability_result import render_survivability

pytestmark = pytest.mark.integration

RATE = 90.0  # messages/s over the six publishers
KEEPALIVE_S = 3  # a client whose node stops answering moves within a few seconds


@pytest.fixture
def nodes(request: pytest.FixtureRequest, uid: str) -> Iterator[NamespacedNodes]:
    """Redis and three linked nodes in namespaces; lease TTL by ``@pytest.mark.parametrize
    ("nodes", [ttl], indirect=True)`` (default 2 s)."""
    ttl = float(getattr(request, "param", 2.0))
    with namespaced_cluster(f"part-{uid}", 3, lease_ttl_s=ttl) as started:
        yield started


def _partitioned(
    nodes: NamespacedNodes,
    uid: str,
    fault: Callable[[], None],
    min_acked: int,
) -> LedgerReport:
    ledger = DeliveryLedger()
    order = (1, 2, 3)
    fleet = node_fleet(
        ledger,
        [nodes.port(i) for i in order],
        f"part/{uid}",
        keepalive=KEEPALIVE_S,
        hosts=[nodes.address(i) for i in order],
    )
    load_with_fault(ledger, fleet, RATE, fault)
    logs = nodes.logs
    return settle_and_check(ledger, fleet, logs, min_acked, timeout=40)


@pytest.mark.parametrize("nodes", [4.0], indirect=True)
def test_a_node_cut_from_its_peers_but_not_from_redis_loses_nothing(
    nodes: NamespacedNodes, uid: str
) -> None:
    """Node 3 loses both links for 8 s while it keeps renewing its lease (TTL 4 s) and its
    clients keep publishing to it.

    The heartbeats close the silent links after 5 s; both sides then dial again. A dial that
    goes unanswered is not a refusal (the node may be alive behind a partition): the link is
    not given up before the lease TTL + 2 s, the heal comes first, and the new links resume
    the old ones (RESUME: what the other side had not handled is sent again). Meanwhile what
    crosses the cut waits with its acknowledgement held; nothing goes to the Redis queue of a
    session that is live on node 3, nothing is lost, no QoS 2 message comes twice.
    """

    def fault() -> None:
        time.sleep(2.0)
        nodes.network.cut("node-3", ["node-1", "node-2"])
        time.sleep(8.0)
        nodes.network.heal("node-3")
        time.sleep(4.0)

    report = _partitioned(nodes, uid, fault, min_acked=600)
    logs = nodes.logs()
    print(report)
    every = "".join(logs.values())
    assert "nothing heard" in every, every[-3000:]  # the partition was noticed...
    assert "given up" not in every, every[-3000:]  # ...not taken for a dead node...
    assert "re-established: resuming" in every, every[-3000:]  # ...and the links resumed
    assert "going offline" not in logs["node-3"], logs["node-3"][-3000:]


@pytest.mark.parametrize("nodes", [4.0], indirect=True)
def test_the_survivability_bench_s_partition_fault(nodes: NamespacedNodes) -> None:
    """``xmq bench survivability --fault partition``: its cut and heal commands are the
    network's own (``nft`` on the bridge); node 3 is cut from its peers for 8 s under QoS 1 +
    QoS 2 persistent load. Nothing missing, no QoS 2 duplicate, no session lost."""
    network = nodes.network
    options = SurvivabilityOptions(
        nodes=tuple((nodes.address(i), nodes.port(i)) for i in (1, 2, 3)),
        pairs=12,
        qos2_pairs=6,
        rate=120,
        duration_s=14,
        kill_at_s=2,
        drain_s=30,
        run_id="part",
        fault=FaultOptions(
            "partition",
            8.0,
            cut_cmd=tuple(network.cut_command("node-3", ["node-1", "node-2"])),
            heal_cmd=tuple(network.heal_command("node-3")),
        ),
    )
    result = uvloop.run(run_survivability(options))
    report = render_survivability(result)
    print(report)
    assert "partition for 8.0 s" in result.fault_note, report
    assert result.sent == 12 * 140, report
    assert result.missing == 0 and result.qos2_duplicates == 0, report
    assert result.passed, report
    assert "re-established: resuming" in "".join(nodes.logs().values())


def test_a_node_cut_from_redis_but_not_from_its_peers_loses_nothing(
    nodes: NamespacedNodes, uid: str
) -> None:
    """Node 3 loses Redis for 3 lease TTLs while its links and its clients stay up.

    It cannot renew its lease: it must stop acting for its sessions before the lease runs out,
    go offline (its clients move to the other nodes and resume their sessions there) and
    rejoin after the heal; what the other nodes held for its sessions goes to their queues
    once its lease is gone. Nothing acknowledged may be lost, no QoS 2 message come twice.

    A QoS 2 PUBLISH that node 3 reads between the cut and its self-fence (90 % of the TTL) is
    routed to the other nodes at once (they record and deliver it) while its packet id's
    ``SADD`` cannot reach Redis, so no PUBREC goes out and the publisher sends it again (DUP)
    to the node it moves to, which has no record of the id. That node routes it under the
    same message id (``core.inbound_ids``: the publisher's session, packet id and its
    release generation), which every subscriber's session has queued already: not again.
    Before (a counter id per node) 50-87 QoS 2 duplicates per run.
    """

    def fault() -> None:
        time.sleep(2.0)
        nodes.network.cut("node-3", ["redis"])
        time.sleep(3 * nodes.lease_ttl_s)
        nodes.network.heal("node-3")
        time.sleep(5.0)

    report = _partitioned(nodes, uid, fault, min_acked=600)
    print(report)
    log = nodes.nodes[3].log()
    assert "going offline" in log, log[-3000:]
