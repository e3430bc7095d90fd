"""Short real runs of the load client against an XMQ broker process (``xmq serve``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from xmq.bench.mosquitto import find_mosquitto, free_port
from xmq.bench.plan import Target
from xmq.bench.report import ratios
from xmq.bench.runner import run_plan
from xmq.bench.scenarios import CommonOptions, connections, fanin, fanout, p2p

pytestmark = pytest.mark.integration

OPTIONS = CommonOptions(duration_s=2.0, warmup_s=0.0, drain_s=10.0, interval_s=0.5, workers=2)


@pytest.fixture(scope="module")
def xmq_broker() -> Iterator[tuple[Target, int]]:
    port = free_port()
    # its HTTP endpoint on any free port: the default (9090) may be another broker's
    env = {**os.environ, "XMQ_METRICS__PORT": "0"}
    process = subprocess.Popen(
        [sys.executable, "-m", "xmq", "serve", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                pytest.fail(f"xmq serve exited with {process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("xmq serve did not listen within 30 s")
                time.sleep(0.1)
        yield Target("127.0.0.1", port, "xmq"), process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@pytest.mark.parametrize("protocol", [5, 4], ids=["mqtt5", "mqtt311"])
def test_fanout_against_xmq(xmq_broker: tuple[Target, int], protocol: int) -> None:
    target, pid = xmq_broker
    options = CommonOptions(
        duration_s=2.0, warmup_s=0.0, interval_s=0.5, workers=2, protocol=protocol
    )
    plan = fanout(target, options, publishers=3, topics=3, subscribers=20, rate=600)
    result = run_plan(plan, options, label="xmq", broker_pids=(pid,))
    assert result.account is not None
    assert result.account.expected == 1200
    assert (result.account.lost, result.account.duplicates) == (0, 0)
    assert result.summary.rss_max > 0


def test_p2p_and_fanin_against_xmq(xmq_broker: tuple[Target, int]) -> None:
    target, pid = xmq_broker
    for plan in (
        p2p(target, OPTIONS, pairs=40, rate=200),
        fanin(target, OPTIONS, publishers=60, subscribers=6, rate_per_publisher=2),
    ):
        result = run_plan(plan, OPTIONS, label="xmq", broker_pids=(pid,))
        assert result.account is not None, plan.name
        assert result.account.lost == 0, plan.name
        assert result.account.duplicates == 0, plan.name


def test_connections_against_xmq(xmq_broker: tuple[Target, int]) -> None:
    target, pid = xmq_broker
    plan = connections(target, OPTIONS, clients=200, rate=200, hold_s=1.0)
    result = run_plan(plan, OPTIONS, label="xmq", broker_pids=(pid,))
    assert result.summary.delivered == 200
    assert result.summary.rss_per_connection > 0


@pytest.mark.skipif(find_mosquitto() is None, reason="mosquitto missing: scripts/setup-system")
def test_side_by_side_ratios_against_mosquitto(xmq_broker: tuple[Target, int]) -> None:
    from xmq.bench.mosquitto import MosquittoProcess

    target, pid = xmq_broker
    xmq = run_plan(
        p2p(target, OPTIONS, pairs=10, rate=100), OPTIONS, label="xmq", broker_pids=(pid,)
    )
    with MosquittoProcess() as mosquitto:
        other = Target("127.0.0.1", mosquitto.port, "mosquitto")
        reference = run_plan(
            p2p(other, OPTIONS, pairs=10, rate=100),
            OPTIONS,
            label="mosquitto",
            broker_pids=(mosquitto.pid,),
        )
    got = ratios(xmq, reference)
    assert got["throughput"] == pytest.approx(1.0, rel=0.2)
    assert got["p99"] is not None and got["p99"] > 0
