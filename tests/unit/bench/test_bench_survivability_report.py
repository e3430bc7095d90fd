"""The survivability result: reconnect distribution, verdict, table and JSON records."""

from __future__ import annotations

import json

import pytest

from xmq.bench.survivability import SurvivabilityOptions
from xmq.bench.survivability_cli import _node
from xmq.bench.survivability_faults import partition
from xmq.bench.survivability_result import (
    IntervalRecord,
    SurvivabilityResult,
    render_survivability,
)


def _result() -> SurvivabilityResult:
    result = SurvivabilityResult(pairs=4, offered_rate=40, victim="127.0.0.1:2", victim_pid=9)
    result.sent = result.received = 400
    result.duplicates = 3
    result.pairs_hit = {1: (0, 3)}
    result.reconnects = [0.5, 4.0, 1.0, 2.0]
    result.reconnect_attempts = [1, 5, 2, 3]
    result.sessions_resumed = 4
    result.intervals = [IntervalRecord(1.0, 40, 40, 0, 8, 0, 1.5, 3.0)]
    result.intervals.append(IntervalRecord(2.0, 40, 37, 3, 6, 2, 2.5, 900.0))
    return result


def test_reconnect_distribution_and_verdict() -> None:
    result = _result()
    stats = result.reconnect_stats()
    assert stats["count"] == 4
    assert stats["min_s"] == 0.5
    assert stats["p50_s"] == 2.0
    assert stats["max_s"] == 4.0
    assert result.passed  # duplicates are allowed at QoS 1
    lossy = _result()
    lossy.missing = 1
    assert not lossy.passed
    twice = _result()
    twice.qos2_pairs, twice.qos2_duplicates = 2, 1  # a QoS 2 duplicate fails the run
    assert not twice.passed
    assert SurvivabilityResult().reconnect_stats() == {}


def test_table_and_json_records() -> None:
    result = _result()
    text = render_survivability(result)
    assert "PASS" in text
    assert "duplicates         QoS 1 3 (allowed, counted), QoS 2 0 (must be 0)" in text
    assert "p50 2.00 s" in text
    summary = json.loads(json.dumps(result.summary_record()))
    assert summary["type"] == "summary"
    assert summary["pairs_hit"] == {"1": [0, 3]}
    assert "intervals" not in summary
    records = result.interval_records()
    assert [r["connected"] for r in records] == [8, 6]
    result.ack_errors = {0x10: 2}
    assert "ack errors         0x10: 2" in render_survivability(result)
    assert "unacknowledged     0 at the end" in render_survivability(result)
    assert result.summary_record()["ack_errors"] == {"0x10": 2}


def test_options() -> None:
    options = SurvivabilityOptions(nodes=(("h", 1), ("h", 2), ("h", 3)), pairs=4, rate=40)
    assert options.victim_index == 2
    assert options.messages_per_publisher == 200
    assert _node("127.0.0.1:1884") == ("127.0.0.1", 1884)
    assert _node(":1884") == ("127.0.0.1", 1884)
    qos = SurvivabilityOptions(nodes=(("h", 1), ("h", 2)), pairs=4, qos2_pairs=1)
    assert [qos.qos_of(n) for n in range(4)] == [1, 1, 1, 2]


def test_a_partition_needs_its_cut_and_heal_commands() -> None:
    with pytest.raises(RuntimeError, match="--cut-cmd and --heal-cmd"):
        partition((), ("true",), 0.0)
