"""Redis faults under load: nothing acknowledged is lost, no QoS 2 message comes twice.

Three real nodes on one real Redis (``appendonly yes``, ``appendfsync always``: every answered
write survives a SIGKILL of Redis), real paho-mqtt clients with persistent sessions at QoS 1 and
QoS 2, each publisher on another node than its subscriber. The independent checker
(``tests.support.fault_checker``) counts every message a publisher got a successful PUBACK /
PUBCOMP for at its subscriber.
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
    in_background,
    pause_process,
    settle_and_check,
)
from tests.support.fault_state import state_reader
from tests.support.http_probe import metric, wait_port
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration

PAIRS = 4  # per QoS level
RATE = 120.0  # messages/s over all publishers


PADDING_KEYS = 20_000
LOAD_DELAY_US = 60  # per key loaded: a restart answers -LOADING for a second or so


@pytest.fixture
def aof_redis() -> Iterator[RedisServer]:
    """Redis with its AOF; a restart loads for a second (``-LOADING`` meanwhile)."""
    extra = (
        "--key-load-delay",
        str(LOAD_DELAY_US),
        "--loading-process-events-interval-bytes",
        "1024",  # answer clients while loading (-LOADING), not only once loaded
    )
    with running_redis(appendonly=True, appendfsync="always", extra_args=extra) as server:
        client = server.client()
        try:
            pipe = client.pipeline(transaction=False)
            for n in range(PADDING_KEYS):
                pipe.set(f"padding:{n}", n)
            pipe.execute()
            client.bgrewriteaof()  # into the AOF's base file, which a restart loads key by key
            while client.info("persistence")["aof_rewrite_in_progress"]:
                time.sleep(0.05)
        finally:
            client.close()
        yield server


def _run_fault(
    redis: RedisServer,
    uid: str,
    lease_ttl_s: float,
    fault: float | str,
    load_s: float = 6.0,
) -> tuple[DeliveryLedger, Fleet, ClusterNodes]:
    nodes = ClusterNodes(redis, f"rf-{uid}", lease_ttl_s=lease_ttl_s, metrics=True)
    ledger = DeliveryLedger()
    fleet = Fleet()
    try:
        nodes.start_many(3)
        ports = [nodes.port(i) for i in (1, 2, 3)]
        fleet = checked_fleet(ledger, ports, f"rf/{uid}", PAIRS)
        fleet.start()
        load = PublishLoad(fleet.publishers, RATE)
        load.start()
        time.sleep(1.5)
        if isinstance(fault, str):
            thread = in_background(lambda: redis.restart())
            time.sleep(0.3)
            fleet.move_subscribers()  # their sessions move while Redis loads: from Redis
        else:
            thread = in_background(lambda: pause_process(redis.proc.pid, fault))
        time.sleep(load_s)
        thread.join(60)
        load.stop()
        load.wait_acknowledged(timeout=30)
        return ledger, fleet, nodes
    except BaseException:
        fleet.stop()
        nodes.stop_all()
        raise


_UNLINKED = 'kind="unlinked_owner"'


def _finish(ledger: DeliveryLedger, fleet: Fleet, nodes: ClusterNodes) -> None:
    state = state_reader(
        ledger,
        fleet,
        nodes.redis.client,
        nodes.cluster,
        lambda: {f"node-{i}": wait_port(n, "metrics") for i, n in nodes.nodes.items()},
        {n.port: f"node-{i}" for i, n in nodes.nodes.items()},
    )
    try:
        waited = sum(
            metric(wait_port(n, "metrics"), "xmq_cluster_orphan_appends_total", _UNLINKED)
            for n in nodes.nodes.values()
        )
        print(f"messages that waited for their session owner's link (issue 12): {waited:.0f}")
        settle_and_check(ledger, fleet, nodes.logs, state=state)
    finally:
        nodes.stop_all()


def test_redis_restarted_from_its_aof_under_load(aof_redis: RedisServer, uid: str) -> None:
    """Writes answered ``-LOADING`` (or cut by the kill) are retried; the held acks wait."""
    run = _run_fault(aof_redis, uid, lease_ttl_s=10.0, fault="restart")
    client = aof_redis.client()
    try:
        loading = client.info("errorstats").get("errorstat_LOADING", {}).get("count", 0)
    finally:
        client.close()
    assert loading > 0, "no write met -LOADING: the fault did not happen as meant"
    _finish(*run)


def test_redis_paused_shorter_than_the_lease(aof_redis: RedisServer, uid: str) -> None:
    _finish(*_run_fault(aof_redis, uid, lease_ttl_s=4.0, fault=1.5))


def test_redis_paused_longer_than_the_lease(aof_redis: RedisServer, uid: str) -> None:
    """The nodes go offline (their lease expired in the pause) and rejoin under a new epoch;
    nothing acknowledged is lost, no QoS 2 message comes twice.

    The message published at the instant Redis stops has its inbound QoS 2 id and its record
    on two nodes' Redis connections: one can be applied before the stop and the other fenced
    after it. The publisher's re-sent PUBLISH carries the same message id on every node
    (``core.inbound_ids``): routed again when its id was written (where its record was too,
    a no-op), routed as new when its id was not (a no-op where it was recorded). Before it, 5
    of 14 runs lost 1 of ~1,262 or had 1 QoS 2 duplicate (the test was xfail). The duplicate
    left after it (5 of 23 runs under load) was the client's: paho re-sent a PUBLISH after its
    PUBREL following a refused reconnect (``fault_checker.keep_owed_pubrels``). The QoS 1 loss
    seen once in ~47 runs (223 acknowledged, never delivered) was a rejoined node answering
    0x10 for the sessions of a live owner it was not linked to yet; they now wait for its link
    (``OrphanAppends.to_unlinked``, ``test_unlinked_owner.py``)."""
    _finish(*_run_fault(aof_redis, uid, lease_ttl_s=2.0, fault=5.0, load_s=9.0))
