"""PNG charts of a run (matplotlib, Agg backend): latency on a log axis, broker RSS, rate."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from xmq.bench.results import RunResult
from xmq.bench.scenarios import CONNECTIONS

_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red")


def chart_name(results: Sequence[RunResult]) -> str:
    first = results[0]
    rate = int(first.summary.offered_rate)
    labels = "-vs-".join(r.label for r in results)
    return f"{first.scenario}-{rate}-{labels}.png"


def write_chart(results: Sequence[RunResult], path: Path) -> Path:
    """One figure for one step: every target's series overlaid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    connections = results[0].kind == CONNECTIONS
    figure, (latency, memory, rate) = plt.subplots(3, 1, figsize=(10, 10), sharex=True)
    for colour, result in zip(_COLOURS, results, strict=False):
        times = [p.t_s for p in result.intervals]
        nan = float("nan")
        avg = [p.lat_avg_us / 1000 if p.delivered else nan for p in result.intervals]
        p99 = [p.lat_p99_us / 1000 if p.delivered else nan for p in result.intervals]
        latency.plot(times, avg, color=colour, label=f"{result.label} avg")
        latency.plot(times, p99, color=colour, linestyle="--", label=f"{result.label} p99")
        rss = [p.broker_rss / (1 << 20) if p.broker_rss else nan for p in result.intervals]
        memory.plot(times, rss, color=colour, label=result.label)
        delivered = [p.delivered / _interval(result) for p in result.intervals]
        rate.plot(times, delivered, color=colour, label=result.label)
    latency.set_yscale("log")
    latency.set_ylabel("connect latency (ms)" if connections else "delivery latency (ms)")
    latency.set_title(f"{results[0].scenario}: {results[0].description}")
    memory.set_ylabel("broker RSS (MB)")
    rate.set_ylabel("connections/s" if connections else "deliveries/s")
    rate.set_xlabel("seconds since start")
    for axis in (latency, memory, rate):
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(loc="best", fontsize="small")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def _interval(result: RunResult) -> float:
    points = result.intervals
    if len(points) >= 2:
        return max(points[1].t_s - points[0].t_s, 1e-9)
    return points[0].t_s if points else 1.0


def write_charts(runs: Sequence[Sequence[RunResult]], directory: Path) -> list[Path]:
    return [write_chart(step, directory / chart_name(step)) for step in runs if step]
