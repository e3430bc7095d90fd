"""The migration scenario against a real 4-node XMQ cluster on loopback (Redis + 4 processes).

The nodes are started one by one (not with ``xmq cluster up``, which stops every node when one
dies), so that killing node C with SIGKILL leaves A, B and D running.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import uvloop

from tests.support.bench_cluster import separate_nodes
from xmq.bench.migration import MigrationOptions, pid_listening_on, render_migration, run_migration
from xmq.bench.plan import Target
from xmq.bench.runner import run_plan
from xmq.bench.scenarios import CommonOptions, p2p

pytestmark = pytest.mark.integration

LEASE_TTL_S = 3


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[tuple[str, int]]]:
    with separate_nodes(tmp_path, 4, "benchmig", LEASE_TTL_S) as started:
        yield started.nodes


def test_session_survives_the_kill_of_its_node(cluster: list[tuple[str, int]]) -> None:
    victim = pid_listening_on(cluster[2][1])
    assert victim is not None
    options = MigrationOptions(
        nodes=tuple(cluster), messages=200, rate=100, reconnect_after_s=LEASE_TTL_S + 1, run_id="t"
    )
    result = uvloop.run(run_migration(options))
    report = render_migration(result)
    assert result.victim_pid == victim
    assert result.sent == 200, report
    assert result.session_present, report
    assert result.live.missing == 0, report
    assert result.persistent.missing == 0, report
    assert result.persistent.duplicates == 0, report
    assert result.passed
    assert "PASS" in report


def test_p2p_across_cluster_nodes(cluster: list[tuple[str, int]]) -> None:
    nodes = tuple(Target(host, port, "xmq") for host, port in cluster)
    options = CommonOptions(
        duration_s=2.0, warmup_s=0.0, interval_s=0.5, workers=2, nodes=nodes, run_id="c"
    )
    pids = tuple(pid for _, port in cluster if (pid := pid_listening_on(port)) is not None)
    plan = p2p(nodes[0], options, pairs=40, rate=200)
    assert {s.node for w in plan.workers for s in w.subscribers} == {0, 1, 2, 3}
    result = run_plan(plan, options, label="xmq-cluster", broker_pids=pids)
    assert result.account is not None
    assert result.account.expected == 400
    assert result.account.lost == 0
    assert result.account.duplicates == 0
    assert len(result.broker_pids) == 4
    assert all(len(p.broker_rss_by_pid) == 4 for p in result.intervals)


def test_migration_needs_three_nodes() -> None:
    with pytest.raises(ValueError, match="three nodes"):
        uvloop.run(run_migration(MigrationOptions(nodes=(("127.0.0.1", 1),))))
