"""Terminal tables, side-by-side comparison with ratios, and JSON lines."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from xmq.bench.results import IntervalPoint, RunResult, Summary
from xmq.bench.scenarios import CONNECTIONS


def fmt_us(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.2f} s"
    if value >= 1000:
        return f"{value / 1000:.2f} ms"
    return f"{value:.0f} µs"


def fmt_bytes(value: float) -> str:
    if value >= 1 << 30:
        return f"{value / (1 << 30):.2f} GB"
    if value >= 1 << 20:
        return f"{value / (1 << 20):.1f} MB"
    if value >= 1 << 10:
        return f"{value / (1 << 10):.1f} KB"
    return f"{value:.0f} B"


def fmt_rate(value: float) -> str:
    return f"{value:,.0f}/s"


def progress_line(label: str, point: IntervalPoint) -> str:
    return (
        f"[{label}] t={point.t_s:5.0f}s  rate {point.delivered:>9,}/s  "
        f"avg {fmt_us(point.lat_avg_us):>9}  p99 {fmt_us(point.lat_p99_us):>9}  "
        f"broker cpu {point.broker_cpu_pct:5.0f}%  rss {fmt_bytes(point.broker_rss):>9}  "
        f"client cpu {point.client_cpu_max_pct:4.0f}%  lag {fmt_us(point.send_lag_max_us)}"
    )


def _rows(result: RunResult) -> list[tuple[str, str, float | None]]:
    """(name, display, comparable value or None) for one run."""
    s: Summary = result.summary
    connections = result.kind == CONNECTIONS
    rows: list[tuple[str, str, float | None]] = [
        ("offered", fmt_rate(s.offered_rate), None),
        (
            "achieved rate" if connections else "sustained rate",
            fmt_rate(s.sustained_rate),
            s.sustained_rate,
        ),
        ("connected" if connections else "delivered", f"{s.delivered:,}", None),
        ("latency avg", fmt_us(s.lat_avg_us), s.lat_avg_us),
        ("latency p50", fmt_us(s.lat_p50_us), s.lat_p50_us),
        ("latency p90", fmt_us(s.lat_p90_us), s.lat_p90_us),
        ("latency p99", fmt_us(s.lat_p99_us), s.lat_p99_us),
        ("latency max", fmt_us(s.lat_max_us), s.lat_max_us),
        ("median of interval avgs", fmt_us(s.median_interval_avg_us), s.median_interval_avg_us),
        (
            "broker CPU mean / peak",
            f"{s.broker_cpu_pct_mean:.0f}% / {s.broker_cpu_pct_peak:.0f}%",
            s.broker_cpu_pct_mean,
        ),
        ("broker CPU in kernel", f"{100 * s.broker_kernel_share:.0f}%", None),
    ]
    if not connections:
        rows.append(
            (
                "broker CPU per delivery",
                f"{s.broker_cpu_per_1k_s * 1000:.1f} µs",
                s.broker_cpu_per_1k_s,
            )
        )
    rows += [
        ("broker RSS avg / max", f"{fmt_bytes(s.rss_avg)} / {fmt_bytes(s.rss_max)}", s.rss_max),
    ]
    if connections:
        rows.append(("RSS per connection", fmt_bytes(s.rss_per_connection), s.rss_per_connection))
    if s.redis_ops_mean:
        rows.append(
            ("Redis CPU / ops", f"{s.redis_cpu_pct_mean:.0f}% / {s.redis_ops_mean:,.0f}/s", None)
        )
    if len(result.broker_pids) > 1 and result.intervals:
        peak = [
            max(p.broker_rss_by_pid[i] for p in result.intervals if p.broker_rss_by_pid)
            for i in range(len(result.broker_pids))
        ]
        rows.append(("broker RSS max per node", " ".join(fmt_bytes(v) for v in peak), None))
    rows.append(
        (
            "client CPU: total mean / worker peak",
            f"{s.client_cpu_pct_mean:.0f}% / {s.client_cpu_pct_max:.0f}%",
            None,
        )
    )
    if not connections:
        rows.append(("client CPU per delivery", f"{s.client_cpu_per_1k_s * 1000:.1f} µs", None))
    if result.account is not None:
        a = result.account
        rows.append(
            (
                "lost / dup / out-of-order",
                f"{a.lost:,} / {a.duplicates:,} / {a.out_of_order:,}",
                None,
            )
        )
    rows.append(("verdict", s.verdict, None))
    return rows


def render_table(results: Sequence[RunResult]) -> str:
    """One column per run; with exactly two runs, a ratio column (first / second)."""
    if not results:
        return ""
    columns = [_rows(r) for r in results]
    names = [name for name, _, _ in columns[0]]
    headers = ["", *[r.label for r in results]]
    ratio = len(results) == 2
    if ratio:
        headers.append(f"{results[0].label}/{results[1].label}")
    lines: list[list[str]] = []
    for row_index, name in enumerate(names):
        line = [name, *[col[row_index][1] for col in columns]]
        if ratio:
            first, second = columns[0][row_index][2], columns[1][row_index][2]
            line.append(f"{first / second:.2f}x" if first is not None and second else "")
        lines.append(line)
    widths = [max(len(row[i]) for row in [headers, *lines]) for i in range(len(headers))]
    title = f"{results[0].scenario}: {results[0].description}"
    out = [title, "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in lines]
    for result in results:
        out += [f"! {result.label}: {flag}" for flag in result.flags]
    return "\n".join(out)


def ratios(xmq: RunResult, reference: RunResult) -> dict[str, float | None]:
    """XMQ / reference for throughput, p99, CPU per delivery and RSS (None when undefined)."""

    def div(a: float, b: float) -> float | None:
        return a / b if b else None

    x, r = xmq.summary, reference.summary
    return {
        "throughput": div(x.sustained_rate, r.sustained_rate),
        "p99": div(x.lat_p99_us, r.lat_p99_us),
        "cpu_per_delivery": div(x.broker_cpu_per_1k_s, r.broker_cpu_per_1k_s),
        "rss_max": div(x.rss_max, r.rss_max),
        "rss_per_connection": div(x.rss_per_connection, r.rss_per_connection),
    }


def result_record(result: RunResult) -> dict[str, object]:
    return {
        "type": "summary",
        "label": result.label,
        "version": result.version,
        "scenario": result.scenario,
        "description": result.description,
        "params": result.params,
        "summary": dataclasses.asdict(result.summary),
        "account": dataclasses.asdict(result.account) if result.account else None,
        "setup": {
            "connected": result.setup_connected,
            "failed": result.setup_failed,
            "error": result.setup_error,
        },
        "flags": result.flags,
        "broker_pids": result.broker_pids,
        "redis_commands": result.redis_commands,
    }


def emit_records(records: Sequence[dict[str, object]], target: str) -> None:
    """JSON lines to standard output (``target`` "-") or appended to the file ``target``."""
    text = "".join(json.dumps(record) + "\n" for record in records)
    if target == "-":
        sys.stdout.write(text)
    else:
        with Path(target).open("a", encoding="utf-8") as stream:
            stream.write(text)


def write_json_lines(results: Sequence[RunResult], stream: IO[str]) -> None:
    for result in results:
        for point in result.intervals:
            record: dict[str, object] = {
                "type": "interval",
                "label": result.label,
                "scenario": result.scenario,
            }
            record |= dataclasses.asdict(point)
            stream.write(json.dumps(record) + "\n")
        stream.write(json.dumps(result_record(result)) + "\n")
    if len(results) == 2:
        compare: dict[str, object] = {
            "type": "compare",
            "scenario": results[0].scenario,
            "labels": [results[0].label, results[1].label],
            "ratios": ratios(results[0], results[1]),
        }
        stream.write(json.dumps(compare) + "\n")
