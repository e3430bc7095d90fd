"""The survivability scenario against a real 3-node XMQ cluster on loopback (Redis + 3 processes).

Steady persistent point-to-point load; the last node is killed with SIGKILL and restarted from
its command line; clients of the killed node reconnect elsewhere and resume their sessions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvloop

from tests.support.bench_cluster import separate_nodes
from xmq.bench.cli import main
from xmq.bench.migration import pid_listening_on
from xmq.bench.survivability import RESTARTED, SurvivabilityOptions, run_survivability
from xmq.bench.survivability_result import render_survivability, write_survivability_chart

pytestmark = pytest.mark.integration

LEASE_TTL_S = 3
Cluster = tuple[list[tuple[str, int]], list[list[str]]]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Three nodes and one Redis; yields the node addresses and each node's command line."""
    with separate_nodes(tmp_path, 3, "benchsurv", LEASE_TTL_S) as started:
        try:
            yield started.nodes, started.commands
        finally:
            started.extra += RESTARTED  # nodes the bench started again
            RESTARTED.clear()


def test_load_survives_the_kill_and_restart_of_a_node(cluster: Cluster, tmp_path: Path) -> None:
    nodes, commands = cluster
    victim = pid_listening_on(nodes[-1][1])
    assert victim is not None
    options = SurvivabilityOptions(
        nodes=tuple(nodes),
        restart_cmd=tuple(commands[-1]),
        pairs=12,
        rate=120,
        duration_s=10,
        kill_at_s=2,
        restart_after_s=3,
        interval_s=1.0,
        drain_s=15,
        run_id="t",
        qos2_pairs=6,  # half the pairs at QoS 2 (their client: PUBREC / PUBREL / PUBCOMP)
    )
    result = uvloop.run(run_survivability(options))
    report = render_survivability(result)
    print(report)
    assert result.victim_pid == victim, report
    assert result.restarted_pid, report
    assert result.listening_again_at_s > result.restarted_at_s, report
    assert result.sent == 12 * 100, report
    assert result.missing == 0, report
    assert result.qos2_duplicates == 0, report
    assert "6 QoS 1, 6 QoS 2" in report
    assert result.received == result.sent, report
    assert result.gave_up == 0, report
    # 4 of the 12 subscribers and 4 of the 12 publishers were on the killed node
    assert len(result.reconnects) == 8, report
    assert result.sessions_resumed == 8, report
    assert result.passed, report
    assert "PASS" in report
    assert len(result.intervals) >= 10, report
    assert sum(p.connection_losses for p in result.intervals) == 8, report
    # every node sampled, the restarted one from its restart on; the victim stops counting
    assert victim in result.broker_pids and result.restarted_pid in result.broker_pids, report
    assert len(result.broker_pids) == 4, report
    publishing = [p for p in result.intervals if p.t_s <= 10]
    assert all(p.broker_cpu_pct > 0 and p.broker_rss_mb > 10 for p in publishing), report
    assert "broker CPU" in report
    assert write_survivability_chart(result, tmp_path / "charts").exists()


def test_cli_survivability_writes_json(cluster: Cluster, tmp_path: Path) -> None:
    nodes, _ = cluster
    out = tmp_path / "surv.jsonl"
    argv = ["survivability", "--pairs", "6", "--rate", "60", "--duration", "3"]
    argv += ["--kill-at", "1", "--json", str(out), "--charts", str(tmp_path / "charts")]
    for host, port in nodes:
        argv += ["--node", f"{host}:{port}"]
    assert main(argv) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    summary = records[-1]
    assert summary["type"] == "summary"
    assert summary["missing"] == 0
    assert summary["restarted_pid"] == 0  # no --restart-cmd: the node stays down
    assert summary["reconnect"]["count"] == 4
    assert any(r["type"] == "interval" for r in records)
    assert list((tmp_path / "charts").glob("survivability-*.png"))


def test_survivability_needs_two_nodes() -> None:
    with pytest.raises(ValueError, match="two nodes"):
        uvloop.run(run_survivability(SurvivabilityOptions(nodes=(("127.0.0.1", 1),))))
    assert main(["survivability"]) == 2
