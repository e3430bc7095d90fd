"""Redis Sentinel: the master is killed under load, the nodes follow the failover without a
restart, and with ``persistence.wait_replicas: 1`` nothing acknowledged is lost.

Real processes: a Redis master, one replica, three ``redis-sentinel`` on loopback; three
``xmq serve`` nodes given ``redis+sentinel://...``; paho persistent subscribers at QoS 1 and 2
counted by the independent checker. Without ``WAIT`` the writes the master acknowledged just
before its death but had not replicated yet are gone after the failover (acknowledged messages
lost); with it every acknowledged write is on the replica that becomes master. After the
failover the new master has no replica until the killed server comes back as one (the
sentinels reconfigure it): acknowledgements wait for it (the durability trade-off).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support.cluster_nodes import ClusterNodes
from tests.support.fault_checker import (
    DeliveryLedger,
    Fleet,
    PublishLoad,
    checked_fleet,
    settle_and_check,
)
from tests.support.redis_sentinel import SentinelGroup, redis_with_sentinels

pytestmark = pytest.mark.integration

LEASE_TTL_S = 10.0  # longer than the failover: the nodes stay members meanwhile


@pytest.fixture
def sentinels() -> Iterator[SentinelGroup]:
    with redis_with_sentinels() as group:
        yield group


def test_master_killed_under_load_nothing_acknowledged_lost(
    sentinels: SentinelGroup, uid: str
) -> None:
    master = sentinels.master()
    nodes = ClusterNodes(
        master,
        f"sentinel-{uid}",
        lease_ttl_s=LEASE_TTL_S,
        url=sentinels.url,
        persistence="  wait_replicas: 1\n  wait_timeout_ms: 500\n",
    )
    ledger = DeliveryLedger()
    fleet = Fleet()
    try:
        nodes.start_many(3)
        ports = [nodes.port(i) for i in (1, 2, 3)]
        fleet = checked_fleet(ledger, ports, f"sn/{uid}", pairs=3)
        fleet.start()
        load = PublishLoad(fleet.publishers, rate=100)
        load.start()
        time.sleep(2.0)
        old = sentinels.kill_master()
        new = sentinels.wait_failover(old)
        print(f"failover {old} -> {new}, acked so far {ledger.report().acked}", flush=True)
        time.sleep(1.0)
        sentinels.restart_killed()  # back as a replica of the new master
        sentinels.wait_replicas(1)
        print(f"replica back, acked so far {ledger.report().acked}", flush=True)
        time.sleep(3.0)
        load.stop()
        assert load.wait_acknowledged(timeout=30) == 0
        print(f"failover {old} -> {new}")
        settle_and_check(
            ledger, fleet, lambda: {f"node-{i}": n.log() for i, n in nodes.nodes.items()}
        )
    finally:
        fleet.stop()
        nodes.stop_all()
