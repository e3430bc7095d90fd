"""Short real runs of the load client against a Mosquitto process the test starts.

Sizes and rates are small (a few seconds, tens of clients) so the tests pass on a busy 2-core
machine; what they check is correctness: every expected delivery accounted, nothing lost or
duplicated, the broker sampled, the CLI's outputs written.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from xmq.bench.cli import main
from xmq.bench.mosquitto import MosquittoProcess, find_mosquitto, free_port
from xmq.bench.plan import Target
from xmq.bench.runner import BenchError, run_plan
from xmq.bench.scenarios import CommonOptions, connections, fanin, fanout, p2p, persistence

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(find_mosquitto() is None, reason="mosquitto missing: scripts/setup-system"),
]

OPTIONS = CommonOptions(duration_s=2.0, warmup_s=0.0, drain_s=10.0, interval_s=0.5, workers=2)


@pytest.fixture
def mosquitto() -> Iterator[MosquittoProcess]:
    with MosquittoProcess() as process:
        yield process


def _target(process: MosquittoProcess) -> Target:
    return Target("127.0.0.1", process.port, "mosquitto")


@pytest.mark.parametrize("protocol", [5, 4], ids=["mqtt5", "mqtt311"])
def test_fanout_delivers_everything_once(mosquitto: MosquittoProcess, protocol: int) -> None:
    options = CommonOptions(
        duration_s=2.0, warmup_s=0.0, interval_s=0.5, workers=2, protocol=protocol
    )
    plan = fanout(_target(mosquitto), options, publishers=3, topics=3, subscribers=20, rate=600)
    result = run_plan(plan, options, label="mosquitto", broker_pids=(mosquitto.pid,))
    account = result.account
    assert account is not None
    assert account.expected == 3 * 20 * 20  # 3 publishers x 20 msgs x 20 subscribers
    assert (account.lost, account.duplicates, account.unexpected) == (0, 0, 0)
    assert result.summary.delivered == account.expected
    assert result.setup_connected == 23
    assert 0 < result.summary.lat_p50_us < 1_000_000
    assert result.summary.rss_max > 0
    assert result.summary.broker_cpu_s >= 0
    assert result.intervals
    assert all(p.broker_rss > 0 for p in result.intervals), "every interval has its sample"


def test_p2p_pairs_are_accounted_per_pair(mosquitto: MosquittoProcess) -> None:
    plan = p2p(_target(mosquitto), OPTIONS, pairs=40, rate=200)
    result = run_plan(plan, OPTIONS, label="mosquitto", broker_pids=(mosquitto.pid,))
    assert result.account is not None
    assert result.account.pairs == 40
    assert result.account.expected == 400
    assert result.account.lost == 0
    assert result.summary.sustained_rate == pytest.approx(200, rel=0.2)
    # 2 s of publishing in 0.5 s intervals; once all is delivered the run stops, not after
    # the whole 10 s drain allowance.
    assert len(result.intervals) <= 4 + 6


def test_fanin_shared_group_gets_each_message_once(mosquitto: MosquittoProcess) -> None:
    plan = fanin(_target(mosquitto), OPTIONS, publishers=60, subscribers=6, rate_per_publisher=2)
    result = run_plan(plan, OPTIONS, label="mosquitto", broker_pids=(mosquitto.pid,))
    assert result.account is not None
    assert result.account.expected == 60 * 4
    assert result.account.lost == 0
    assert result.account.duplicates == 0


def test_connections_measures_connect_latency_and_memory(mosquitto: MosquittoProcess) -> None:
    plan = connections(_target(mosquitto), OPTIONS, clients=300, rate=300, hold_s=1.0)
    result = run_plan(plan, OPTIONS, label="mosquitto", broker_pids=(mosquitto.pid,))
    assert result.summary.delivered == 300
    assert result.summary.lat_p50_us > 0
    assert result.summary.rss_max >= result.summary.rss_baseline > 0
    assert max(p.connections for p in result.intervals) == 300


def test_unreachable_broker_is_an_error() -> None:
    options = CommonOptions(duration_s=1.0, warmup_s=0.0, interval_s=0.5)
    plan = p2p(Target("127.0.0.1", 1, "nobody"), options, pairs=2, rate=2)
    with pytest.raises(BenchError, match="no client could connect"):
        run_plan(plan, options, label="nobody", setup_timeout_s=20)


def test_cli_compare_writes_table_json_and_chart(
    mosquitto: MosquittoProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.jsonl"
    argv = [
        "p2p", "--port", str(mosquitto.port), "--label", "first", "--broker-pid",
        str(mosquitto.pid), "--compare", "mosquitto", "--pairs", "10", "--rate", "100",
        "--duration", "2", "--warmup", "0", "--interval", "0.5", "--pause", "0",
        "--json", str(out), "--charts", str(tmp_path / "charts"), "--quiet",
    ]  # fmt: skip
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "first/mosquitto" in table
    records = [json.loads(line) for line in out.read_text().splitlines()]
    summaries = [r for r in records if r["type"] == "summary"]
    assert [s["label"] for s in summaries] == ["first", "mosquitto"]
    assert all(s["account"]["lost"] == 0 for s in summaries)
    assert records[-1]["type"] == "compare"
    assert list((tmp_path / "charts").glob("*.png"))


def test_cli_survivability_needs_nodes() -> None:
    assert main(["survivability"]) == 2


@pytest.fixture
def redis_url() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server missing: scripts/setup-system")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_redis_cpu_and_commands_are_sampled(mosquitto: MosquittoProcess, redis_url: str) -> None:
    options = CommonOptions(duration_s=2.0, warmup_s=0.0, interval_s=0.5, redis_url=redis_url)
    plan = p2p(_target(mosquitto), options, pairs=5, rate=50)
    result = run_plan(plan, options, label="mosquitto", broker_pids=(mosquitto.pid,))
    assert result.summary.redis_ops_mean > 0  # at least the probe's own INFO calls
    assert result.redis_commands.get("info", 0) > 0
    assert any(p.redis_ops for p in result.intervals)


@pytest.mark.parametrize("protocol", [5, 4], ids=["mqtt5", "mqtt311"])
def test_persistence_runs_with_persistent_sessions(
    mosquitto: MosquittoProcess, protocol: int
) -> None:
    options = CommonOptions(duration_s=2.0, warmup_s=0.0, interval_s=0.5, protocol=protocol)
    plan = persistence(_target(mosquitto), options, pairs=20, rate=100, session_expiry=60)
    result = run_plan(plan, options, label="mosquitto", broker_pids=(mosquitto.pid,))
    assert result.account is not None
    assert result.account.expected == 200
    assert result.account.lost == 0


def test_large_final_reports_reach_the_runner(mosquitto: MosquittoProcess) -> None:
    # 50 publishers x 300 subscribers: 15,000 (receiver, publisher) bitmaps to send back,
    # far beyond a pipe's buffer (a non-blocking report pipe once broke this).
    options = CommonOptions(duration_s=1.0, warmup_s=0.0, interval_s=0.5, workers=1)
    plan = fanout(
        _target(mosquitto), options, publishers=50, topics=50, subscribers=300, rate=15_000
    )
    result = run_plan(plan, options, label="mosquitto", broker_pids=(mosquitto.pid,))
    assert result.account is not None
    assert result.account.pairs == 15_000
    assert result.account.lost == 0


def test_cli_json_to_stdout_is_pure_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "fanin", "--target", "mosquitto", "--publishers", "20", "--subscribers", "2",
        "--rate-per-publisher", "2", "--duration", "2", "--warmup", "0", "--interval", "0.5",
        "--pause", "0", "--json", "-",
    ]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    records = [json.loads(line) for line in captured.out.splitlines()]
    assert records[-1]["type"] == "summary"
    assert records[-1]["account"]["expected"] == 80
    assert "fanin:" in captured.err  # the table went to stderr
