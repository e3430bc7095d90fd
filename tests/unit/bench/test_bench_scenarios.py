"""Scenario plans: sizes, rates, accounting expectations and their split over workers."""

from __future__ import annotations

import pytest

from xmq.bench.accounting import SeqTracker
from xmq.bench.cli import build_parser
from xmq.bench.migration import MigrationOptions, tally_receiver
from xmq.bench.mosquitto import tuned_config
from xmq.bench.plan import Target
from xmq.bench.redis_probe import RedisSample, command_delta, parse_commandstats
from xmq.bench.runner import BenchError, run_plan
from xmq.bench.scenarios import (
    CommonOptions,
    connections,
    fanin,
    fanout,
    p2p,
    persistence,
    source_addresses,
)

TARGET = Target("127.0.0.1", 1884, "xmq")


def test_fanout_rate_is_total_deliveries() -> None:
    options = CommonOptions(workers=2, duration_s=10, run_id="r")
    plan = fanout(TARGET, options, publishers=5, topics=5, subscribers=1000, rate=50_000)
    assert plan.offered_rate == pytest.approx(50_000)
    assert plan.deliveries_per_message == 1000
    worker = plan.workers[0]
    assert worker.rate_per_publisher == pytest.approx(10.0)
    assert worker.messages_per_publisher == 100
    assert sum(len(w.subscribers) for w in plan.workers) == 1000
    assert sum(len(w.publishers) for w in plan.workers) == 5
    assert plan.expectations[999] == [0, 1, 2, 3, 4]
    assert len(plan.workers[1].subscribers[0].filters) == 5
    assert worker.source_addresses[:2] == ("127.0.0.1", "127.0.0.2")
    ids = [s.client_id for w in plan.workers for s in w.subscribers]
    assert len(set(ids)) == 1000


def test_p2p_pairs_expect_their_own_publisher() -> None:
    plan = p2p(TARGET, CommonOptions(duration_s=5), pairs=2000, rate=20_000)
    assert plan.expectations[1234] == [1234]
    assert plan.workers[0].rate_per_publisher == pytest.approx(10.0)
    assert plan.publish_duration_s == pytest.approx(5.0)


def test_fanin_is_one_shared_receiver() -> None:
    plan = fanin(TARGET, CommonOptions(workers=3), publishers=300, subscribers=30)
    assert list(plan.expectations) == [0]
    assert len(plan.expectations[0]) == 300
    filters = {s.filters for w in plan.workers for s in w.subscribers}
    assert len(filters) == 1
    (only,) = filters
    assert only[0].startswith("$share/bench/")
    assert {s.receiver for w in plan.workers for s in w.subscribers} == {0}


def test_connections_spread_clients_and_rate_over_workers() -> None:
    plan = connections(TARGET, CommonOptions(workers=4), clients=10_000, rate=2000)
    assert [len(w.idle_clients) for w in plan.workers] == [2500] * 4
    assert all(w.connect_rate == pytest.approx(500) for w in plan.workers)
    assert plan.publish_duration_s == pytest.approx(5.0)


@pytest.mark.parametrize(
    ("host", "count", "expected"),
    [
        ("127.0.0.1", 3, ("127.0.0.1", "127.0.0.2", "127.0.0.3")),
        ("10.0.0.5", 3, ()),
        ("127.0.0.1", 0, ()),
    ],
    ids=["loopback", "remote", "disabled"],
)
def test_source_addresses(host: str, count: int, expected: tuple[str, ...]) -> None:
    assert source_addresses(host, count) == expected


def test_a_worker_beyond_the_file_limit_is_refused_before_starting() -> None:
    plan = connections(TARGET, CommonOptions(workers=1), clients=30_000, rate=1000)
    with pytest.raises(BenchError, match="--workers"):
        run_plan(plan, CommonOptions(workers=1), label="xmq")


def test_mosquitto_config_is_tuned() -> None:
    config = tuned_config(18830, max_inflight=100)
    assert "listener 18830 127.0.0.1" in config
    for line in ("persistence false", "set_tcp_nodelay true", "max_queued_messages 1000000"):
        assert line in config.splitlines()
    assert "max_inflight_messages 100" in config


def test_parser_reads_rate_ladders_and_repeated_pids() -> None:
    args = build_parser().parse_args(
        ["fanout", "--rate", "20000,40_000", "--broker-pid", "5", "--broker-pid", "6"]
    )
    assert args.rate == [20_000.0, 40_000.0]
    assert args.broker_pid == [5, 6]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["p2p", "--rate", "-5"])


def test_commandstats_parsing_and_delta() -> None:
    before = RedisSample(1.0, 10, parse_commandstats({"cmdstat_get": {"calls": 5}, "x": 1}))
    after_info: dict[str, object] = {
        "cmdstat_get": {"calls": 9, "usec": 3},
        "cmdstat_evalsha": {"calls": 40},
    }
    after = RedisSample(2.0, 60, parse_commandstats(after_info))
    assert before.calls == {"get": 5}
    assert list(command_delta(before, after).items()) == [("evalsha", 40), ("get", 4)]


def test_persistence_is_p2p_with_persistent_sessions() -> None:
    plan = persistence(TARGET, CommonOptions(workers=2), pairs=100, rate=1000, session_expiry=60)
    assert plan.name == "persistence"
    assert all(w.session_expiry == 60 for w in plan.workers)
    assert plan.expectations[7] == [7]
    assert plan.offered_rate == pytest.approx(1000)


def test_migration_roles_and_tally() -> None:
    three = MigrationOptions(nodes=(("h", 1), ("h", 2), ("h", 3)))
    assert [three.node(role)[1] for role in "ABCD"] == [1, 2, 3, 2]
    four = MigrationOptions(nodes=(("h", 1), ("h", 2), ("h", 3), ("h", 4)))
    assert four.node("D") == ("h", 4)
    tracker = SeqTracker()
    for seq in [0, 1, 1, 3, 2, 9]:
        tracker.record(seq)
    tally = tally_receiver(tracker, 5)  # 0..4 sent; 4 missing; 9 was never sent
    assert (tally.received, tally.missing, tally.duplicates) == (4, 1, 1)
    assert tally_receiver(None, 7).missing == 7


def test_cluster_runs_spread_clients_and_cross_nodes() -> None:
    nodes = tuple(Target("127.0.0.1", 1900 + n, "xmq") for n in range(3))
    plan = p2p(TARGET, CommonOptions(workers=2, nodes=nodes), pairs=6, rate=60)
    subs = {s.receiver: s.node for w in plan.workers for s in w.subscribers}
    pubs = {p.publisher_id: p.node for w in plan.workers for p in w.publishers}
    assert subs == {0: 0, 1: 1, 2: 2, 3: 0, 4: 1, 5: 2}
    assert all(pubs[n] != subs[n] for n in range(6))  # every pair crosses nodes
    worker = plan.workers[0]
    assert worker.node_target(2).port == 1902
    assert p2p(TARGET, CommonOptions(), pairs=2).workers[0].node_target(5) == TARGET
