"""Reading a ladder of runs: the highest flat rate, and held / knee / saturated connect rates."""

from __future__ import annotations

from collections.abc import Sequence

from xmq.bench.report import fmt_rate, fmt_us
from xmq.bench.results import RunResult

KNEE_LATENCY_FACTOR = 3.0
HELD_RATE_RATIO = 0.95


def classify_connect_ladder(steps: Sequence[RunResult]) -> list[str]:
    """Per step: ``held`` (rate achieved, latency near the first step's), ``knee`` (rate
    achieved but p99 connect latency over 3x the first step's), ``saturated`` (rate missed)."""
    if not steps:
        return []
    base = max(steps[0].summary.lat_p99_us, 1.0)
    verdicts: list[str] = []
    for result in steps:
        s = result.summary
        if s.sustained_rate < HELD_RATE_RATIO * s.offered_rate:
            verdicts.append("saturated")
        elif s.lat_p99_us > KNEE_LATENCY_FACTOR * base:
            verdicts.append("knee")
        else:
            verdicts.append("held")
    return verdicts


def ladder_verdicts(runs: Sequence[Sequence[RunResult]]) -> str:
    """Table of the connection ladder, one line per (target, rate)."""
    lines = ["connection-rate ladder:"]
    labels = [r.label for r in runs[0]] if runs else []
    for column, label in enumerate(labels):
        steps = [step[column] for step in runs if len(step) > column]
        for result, verdict in zip(steps, classify_connect_ladder(steps), strict=True):
            s = result.summary
            lines.append(
                f"  {label:<10} target {fmt_rate(s.offered_rate):>10}  achieved "
                f"{fmt_rate(s.sustained_rate):>10}  connect p50 {fmt_us(s.lat_p50_us):>9}  "
                f"p99 {fmt_us(s.lat_p99_us):>9}  {verdict}"
            )
    return "\n".join(lines)


def highest_flat(steps: Sequence[RunResult]) -> RunResult | None:
    flat = [r for r in steps if r.summary.verdict == "flat" and not r.flags]
    return max(flat, key=lambda r: r.summary.offered_rate, default=None)


def rate_ladder_summary(runs: Sequence[Sequence[RunResult]]) -> str:
    lines = ["rate ladder:"]
    labels = [r.label for r in runs[0]] if runs else []
    for column, label in enumerate(labels):
        steps = [step[column] for step in runs if len(step) > column]
        for result in steps:
            s = result.summary
            lines.append(
                f"  {label:<10} offered {fmt_rate(s.offered_rate):>10}  sustained "
                f"{fmt_rate(s.sustained_rate):>10}  avg {fmt_us(s.lat_avg_us):>9}  "
                f"p99 {fmt_us(s.lat_p99_us):>9}  {s.verdict}"
                + ("  [" + "; ".join(result.flags) + "]" if result.flags else "")
            )
        best = highest_flat(steps)
        lines.append(
            f"  {label}: highest rate with flat latency and no flags: "
            + (fmt_rate(best.summary.offered_rate) if best else "none")
        )
    return "\n".join(lines)
