"""What a survivability run measured, its table, its JSON lines and its chart."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class IntervalRecord:
    t_s: float
    """End of the interval, seconds after the start of publishing."""
    sent: int
    """PUBLISH packets written (re-sends after a reconnect included)."""
    delivered: int
    """First copies received."""
    duplicates: int
    connected: int
    connection_losses: int
    latency_avg_ms: float
    latency_max_ms: float
    broker_cpu_pct: float = 0.0
    """CPU of every sampled broker process over the interval, % of one core (summed)."""
    broker_rss_mb: float = 0.0
    redis_cpu_pct: float | None = None
    redis_ops: float | None = None
    """Redis commands per second (``--redis-url``)."""


@dataclass(slots=True)
class SurvivabilityResult:
    pairs: int = 0
    offered_rate: float = 0.0
    victim: str = ""
    victim_pid: int = 0
    killed_at_s: float = 0.0
    restarted_pid: int = 0
    restarted_at_s: float = 0.0
    listening_again_at_s: float = 0.0
    sent: int = 0
    """Distinct messages the publishers sent (sequence numbers)."""
    received: int = 0
    missing: int = 0
    duplicates: int = 0
    """Every second copy (QoS 1 and QoS 2)."""
    qos2_duplicates: int = 0
    """Second copies of QoS 2 messages (must be 0)."""
    qos2_pairs: int = 0
    pairs_hit: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Pair index -> (missing, duplicates), for the pairs with either."""
    reconnects: list[float] = field(default_factory=list)
    """Seconds from a connection's loss to the accepting CONNACK, one per reconnect."""
    reconnect_attempts: list[int] = field(default_factory=list)
    sessions_resumed: int = 0
    sessions_lost: int = 0
    gave_up: int = 0
    refusals: list[str] = field(default_factory=list)
    broker_pids: list[int] = field(default_factory=list)
    """Broker processes sampled (the restarted node's included)."""
    intervals: list[IntervalRecord] = field(default_factory=list)
    elapsed_s: float = 0.0
    fault: str = "kill"
    fault_note: str = ""
    """What the fault did (e.g. how many link connections were reset)."""
    unacknowledged: int = 0
    """Messages the publishers had sent (or had due) without an acknowledgement when the run
    ended: counted as missing if their subscriber did not get them."""
    ack_errors: dict[int, int] = field(default_factory=dict)
    """Publisher acks with reason 0x10 or >= 0x80: reason -> count (their messages were not
    stored for the subscriber: they count as missing)."""
    takeover_both_live: int = 0
    """``takeover``: client ids left with two live connections (must be 0)."""

    @property
    def passed(self) -> bool:
        return (
            self.missing == 0
            and self.qos2_duplicates == 0
            and self.gave_up == 0
            and self.sessions_lost == 0
            and self.takeover_both_live == 0
        )

    def reconnect_stats(self) -> dict[str, float]:
        times = sorted(self.reconnects)
        if not times:
            return {}

        def at(fraction: float) -> float:
            return times[min(len(times) - 1, int(fraction * len(times)))]

        return {
            "count": len(times),
            "min_s": times[0],
            "p50_s": at(0.5),
            "p90_s": at(0.9),
            "max_s": times[-1],
            "mean_s": statistics.fmean(times),
        }

    def usage_stats(self) -> dict[str, float]:
        """Broker CPU mean/peak, RSS max and Redis CPU mean over the intervals."""
        points = self.intervals
        if not points:
            return {}
        cpu = [p.broker_cpu_pct for p in points]
        stats = {
            "broker_cpu_pct_mean": statistics.fmean(cpu),
            "broker_cpu_pct_peak": max(cpu),
            "broker_rss_mb_max": max(p.broker_rss_mb for p in points),
        }
        redis = [p.redis_cpu_pct for p in points if p.redis_cpu_pct is not None]
        if redis:
            stats["redis_cpu_pct_mean"] = statistics.fmean(redis)
            stats["redis_ops_mean"] = statistics.fmean(
                p.redis_ops for p in points if p.redis_ops is not None
            )
        return stats

    def summary_record(self) -> dict[str, Any]:
        record = dataclasses.asdict(self)
        del record["intervals"]
        record["pairs_hit"] = {str(k): list(v) for k, v in self.pairs_hit.items()}
        record["ack_errors"] = {f"0x{k:02x}": v for k, v in self.ack_errors.items()}
        return {
            "type": "summary",
            "scenario": "survivability",
            **record,
            "reconnect": self.reconnect_stats(),
            "usage": self.usage_stats(),
            "passed": self.passed,
        }

    def interval_records(self) -> list[dict[str, Any]]:
        return [
            {"type": "interval", "scenario": "survivability", **dataclasses.asdict(point)}
            for point in self.intervals
        ]


def render_survivability(result: SurvivabilityResult) -> str:
    rc = result.reconnect_stats()
    restart = (
        f"restarted at {result.restarted_at_s:.1f} s (pid {result.restarted_pid}), listening at "
        f"{result.listening_again_at_s:.1f} s"
        if result.restarted_pid
        else "not restarted"
    )
    lines = [
        f"survivability: {result.pairs} persistent pairs at {result.offered_rate:,.0f} msg/s "
        f"({result.pairs - result.qos2_pairs} QoS 1, {result.qos2_pairs} QoS 2), "
        f"fault: {result.fault}",
        f"  fault              {result.victim} (pid {result.victim_pid}) at "
        f"{result.killed_at_s:.1f} s: {result.fault_note}; {restart}",
        f"  messages sent      {result.sent:,}",
        f"  received           {result.received:,}",
        f"  missing            {result.missing:,}",
        f"  duplicates         QoS 1 {result.duplicates - result.qos2_duplicates:,} (allowed, "
        f"counted), QoS 2 {result.qos2_duplicates:,} (must be 0)"
        + ("" if result.qos2_pairs else ": no QoS 2 pairs"),
        f"  unacknowledged     {result.unacknowledged:,} at the end (sent or due, no ack)",
        "  ack errors         "
        + (
            ", ".join(f"0x{code:02x}: {count}" for code, count in sorted(result.ack_errors.items()))
            or "none"
        ),
        f"  pairs hit          {len(result.pairs_hit)} of {result.pairs}"
        + (f" {dict(list(result.pairs_hit.items())[:10])}" if result.pairs_hit else ""),
    ]
    if rc:
        lines.append(
            f"  reconnects         {rc['count']:.0f}: min {rc['min_s']:.2f} s, p50 "
            f"{rc['p50_s']:.2f} s, p90 {rc['p90_s']:.2f} s, max {rc['max_s']:.2f} s "
            f"(attempts max {max(result.reconnect_attempts)})"
        )
    usage = result.usage_stats()
    if usage and result.broker_pids:
        redis = (
            f"; Redis CPU {usage['redis_cpu_pct_mean']:.0f}%, "
            f"{usage['redis_ops_mean']:,.0f} commands/s"
            if "redis_cpu_pct_mean" in usage
            else ""
        )
        lines.append(
            f"  broker CPU         {usage['broker_cpu_pct_mean']:.0f}% mean, "
            f"{usage['broker_cpu_pct_peak']:.0f}% peak (all nodes, % of one core); RSS max "
            f"{usage['broker_rss_mb_max']:,.1f} MB{redis}"
        )
    lines += [
        f"  sessions           {result.sessions_resumed} resumed, {result.sessions_lost} lost, "
        f"{result.gave_up} gave up",
        f"  verdict            {'PASS' if result.passed else 'FAIL'}",
        "",
        "   t s   sent/s  deliv/s  dup  conn  lost  avg ms   max ms  cpu %  rss MB",
    ]
    previous = 0.0
    for p in result.intervals:
        span = max(p.t_s - previous, 1e-9)
        previous = p.t_s
        lines.append(
            f"{p.t_s:6.1f} {p.sent / span:8,.0f} {p.delivered / span:8,.0f} {p.duplicates:4d} "
            f"{p.connected:5d} {p.connection_losses:5d} {p.latency_avg_ms:7.1f} "
            f"{p.latency_max_ms:8.1f} {p.broker_cpu_pct:6.0f} {p.broker_rss_mb:7.1f}"
        )
    lines += [f"  refused: {text}" for text in result.refusals]
    return "\n".join(lines)


def write_survivability_chart(result: SurvivabilityResult, directory: Path) -> Path:
    """Delivery rate, connected clients and latency over the test, kill and restart marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"survivability-{int(result.offered_rate)}-{result.pairs}.png"
    times = [p.t_s for p in result.intervals]
    spans = [b - a for a, b in zip([0.0, *times], times, strict=False)]
    figure, (rate, clients, latency) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    pairs = list(zip(result.intervals, spans, strict=True))
    rate.plot(times, [p.delivered / max(s, 1e-9) for p, s in pairs], label="delivered /s")
    rate.plot(times, [p.sent / max(s, 1e-9) for p, s in pairs], label="sent /s", linestyle="--")
    rate.set_ylabel("messages/s")
    rate.legend()
    clients.plot(times, [p.connected for p in result.intervals], label="connected clients")
    clients.set_ylabel("clients")
    latency.plot(times, [max(p.latency_avg_ms, 1e-3) for p in result.intervals], label="avg")
    latency.plot(times, [max(p.latency_max_ms, 1e-3) for p in result.intervals], label="max")
    latency.set_yscale("log")
    latency.set_ylabel("latency ms")
    latency.set_xlabel("seconds since the start of publishing")
    latency.legend()
    for axis in (rate, clients, latency):
        axis.axvline(result.killed_at_s, color="tab:red", linestyle=":")
        if result.restarted_pid:
            axis.axvline(result.restarted_at_s, color="tab:green", linestyle=":")
    rate.set_title(
        f"survivability: {result.pairs} pairs, {result.offered_rate:,.0f} msg/s; "
        f"kill (red) and restart (green) of {result.victim}"
    )
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path
