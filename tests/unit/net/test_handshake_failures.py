"""Failed TLS handshakes: counted by reason, one log line per reason per minute."""

from __future__ import annotations

import logging
import ssl

import pytest

from xmq.net.tls_contexts import LOG_INTERVAL_S, MAX_REASONS, HandshakeFailures


def _error(reason: str) -> ssl.SSLError:
    error = ssl.SSLError(1, f"[SSL: {reason.upper()}] {reason} (_ssl.c:1)")
    error.reason = reason.upper()
    return error


def test_counts_by_reason_and_logs_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    failures = HandshakeFailures("mqtts", clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="xmq.net"):
        for _ in range(5):
            failures.failed(_error("wrong_version_number"), "10.0.0.7:40001")
        failures.failed(_error("certificate_verify_failed"), "10.0.0.8:40002")
        assert failures.by_reason == {"wrong_version_number": 5, "certificate_verify_failed": 1}
        assert len(caplog.records) == 2  # one per reason
        now[0] += LOG_INTERVAL_S - 1
        failures.failed(_error("wrong_version_number"), "10.0.0.7:40001")
        assert len(caplog.records) == 2
        now[0] += 1
        failures.failed(_error("wrong_version_number"), "10.0.0.7:40001")
    assert len(caplog.records) == 3
    last = caplog.records[-1].getMessage()
    assert "listener mqtts: TLS handshake with 10.0.0.7:40001 failed" in last
    assert "10.0.0.8:40002" in caplog.records[1].getMessage()
    assert "(5 more since the last line)" in last
    assert "7 in all" in last


def test_reasons_are_bounded() -> None:
    failures = HandshakeFailures("mqtts", clock=lambda: 0.0)
    for n in range(MAX_REASONS + 10):
        failures.failed(_error(f"reason_{n}"), "10.0.0.9:1")
    assert len(failures.by_reason) == MAX_REASONS + 1
    assert failures.by_reason["other"] == 10
