"""The instruction bench's arithmetic and its reading of callgrind and strace -c output."""

from __future__ import annotations

import pytest

from xmq.bench.tracers import (
    SyscallCounts,
    TracerError,
    parse_callgrind_total,
    parse_strace_summary,
    per_unit,
)

# A callgrind_control -d dump of Mosquitto 2.0.11 (valgrind 3.19), bodies shortened.
CALLGRIND_DUMP = """\
# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 22396
cmd:  /usr/sbin/mosquitto -c m.conf
part: 1


desc: I1 cache:
desc: Timerange: Basic block 0 - 16620
desc: Trigger: dump

positions: line
events: Ir
summary: 75356


ob=(1) /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
fl=(17) ./string/../sysdeps/x86_64/multiarch/memmove-vec-unaligned-erms.S
fn=(38) memcpy
219 47
+6 47

totals: 75356
"""

# strace 6.1: `strace -c -f -o FILE -p PID` on Mosquitto, detached with SIGINT.
STRACE_TABLE = """\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 61.20    0.000612          51        12           read
 20.00    0.000200          50         4           write
  0.00    0.000000           0         3           close
  0.00    0.000000           0        22           rt_sigprocmask
  0.00    0.000000           0         2         1 accept
  0.00    0.000000           0        10           epoll_wait
  0.00    0.000000           0         6         2 epoll_ctl
  0.00    0.000000           0     12345           futex
------ ----------- ----------- --------- --------- ----------------
100.00    0.001000           0     12404         3 total
"""


def test_callgrind_total_is_read_from_totals() -> None:
    assert parse_callgrind_total(CALLGRIND_DUMP) == 75356


def test_callgrind_summary_alone_is_enough() -> None:
    text = CALLGRIND_DUMP.replace("totals: 75356\n", "")
    assert parse_callgrind_total(text.replace("summary: 75356", "summary: 99")) == 99


def test_callgrind_without_a_total_is_refused() -> None:
    text = CALLGRIND_DUMP.replace("totals: 75356\n", "").replace("summary: 75356\n", "")
    with pytest.raises(TracerError):
        parse_callgrind_total(text)


def test_callgrind_counting_other_events_first_is_refused() -> None:
    with pytest.raises(TracerError):
        parse_callgrind_total(CALLGRIND_DUMP.replace("events: Ir", "events: Dr Ir"))


def test_strace_rows_and_errors() -> None:
    counts = parse_strace_summary(STRACE_TABLE)
    assert counts.calls["read"] == 12
    assert counts.calls["futex"] == 12345
    assert counts.calls["accept"] == 2
    assert counts.errors == {"accept": 1, "epoll_ctl": 2}
    assert "total" not in counts.calls
    assert counts.total == 12404


def test_strace_total_must_match_its_rows() -> None:
    with pytest.raises(TracerError):
        parse_strace_summary(STRACE_TABLE.replace("    12404 ", "    12405 "))


def test_strace_without_a_table_is_refused() -> None:
    with pytest.raises(TracerError):
        parse_strace_summary("strace: Process 1 attached\n")


def test_strace_counts_add_per_call() -> None:
    one = SyscallCounts({"read": 2, "write": 1}, {"read": 1})
    two = SyscallCounts({"read": 3, "sendmsg": 4}, {})
    both = one + two
    assert both.calls == {"read": 5, "write": 1, "sendmsg": 4}
    assert both.errors == {"read": 1}
    assert both.total == 10


def test_per_unit_cancels_fixed_costs() -> None:
    fixed, each = 1_000_000, 250
    full = fixed + 2000 * each
    half = fixed + 1000 * each
    assert per_unit(full, half, 2000, 1000) == 250
    # actual counts, not the nominal N and N/2
    assert per_unit(fixed + 2010 * each, fixed + 990 * each, 2010, 990) == 250


def test_per_unit_needs_the_larger_run_first() -> None:
    with pytest.raises(ValueError):
        per_unit(10, 5, 100, 100)
    with pytest.raises(ValueError):
        per_unit(10, 5, 50, 100)
