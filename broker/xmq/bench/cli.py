"""``xmq bench <scenario>``: argument parsing and the run loop (targets x rate steps)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from xmq.bench.mosquitto import MosquittoProcess
from xmq.bench.packets import MQTT_V5, MQTT_V311
from xmq.bench.plan import Target
from xmq.bench.report import emit_records, progress_line, render_table, write_json_lines
from xmq.bench.results import IntervalPoint, RunResult
from xmq.bench.runner import BenchError, run_plan
from xmq.bench.scenarios import (
    CommonOptions,
    ScenarioPlan,
    connections,
    fanin,
    fanout,
    p2p,
    persistence,
)
from xmq.bench.steps import ladder_verdicts, rate_ladder_summary
from xmq.bench.survivability_cli import add_survivability_arguments, survivability_main

SCENARIOS = ("fanout", "p2p", "fanin", "connections", "persistence")


def _rates(text: str) -> list[float]:
    try:
        values = [float(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a rate list: {text!r}") from exc
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError("rates must be positive")
    return values


def _common(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("target")
    group.add_argument("--host", default="127.0.0.1", help="broker address (default 127.0.0.1)")
    group.add_argument("--port", type=int, default=1884, help="broker port (default 1884)")
    group.add_argument("--label", default="xmq", help="name of the target in reports")
    group.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="cluster node (repeat): clients are spread over the nodes; overrides --host/--port",
    )
    group.add_argument(
        "--broker-pid",
        type=int,
        action="append",
        default=[],
        metavar="PID",
        help="broker process to sample for CPU and RSS (repeat for every node)",
    )
    group.add_argument(
        "--target",
        choices=("address", "mosquitto"),
        default="address",
        help="'mosquitto' starts a private tuned Mosquitto as the only target",
    )
    group.add_argument(
        "--compare",
        choices=("mosquitto",),
        default=None,
        help="also run the same scenario against a private tuned Mosquitto",
    )
    group.add_argument("--redis-url", default=None, help="(cluster scenarios, reserved)")
    run = parser.add_argument_group("run")
    run.add_argument("--duration", type=float, default=20.0, help="publishing seconds per run")
    run.add_argument("--warmup", type=float, default=3.0, help="seconds left out of the figures")
    run.add_argument("--drain", type=float, default=10.0, help="max seconds to wait for stragglers")
    run.add_argument("--interval", type=float, default=1.0, help="series interval in seconds")
    run.add_argument("--workers", type=int, default=1, help="load-client processes")
    run.add_argument("--qos", type=int, choices=(0, 1), default=1)
    run.add_argument("--mqtt", choices=("5", "3.1.1"), default="5", help="protocol version")
    run.add_argument("--sources", type=int, default=8, help="source addresses 127.0.0.1..N")
    run.add_argument("--setup-rate", type=float, default=2000.0, help="setup connects per second")
    run.add_argument("--pause", type=float, default=2.0, help="seconds between runs")
    out = parser.add_argument_group("output")
    out.add_argument("--json", default=None, metavar="PATH", help="JSON lines ('-' = stdout)")
    out.add_argument("--charts", default=None, metavar="DIR", help="write PNG charts here")
    out.add_argument("--quiet", action="store_true", help="no progress lines")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xmq bench",
        description="Run the published MQTT benchmark scenarios against a broker "
        "(and side by side with Mosquitto).",
    )
    sub = parser.add_subparsers(dest="scenario", required=True)
    p = sub.add_parser("fanout", help="P publishers on T topics, S subscribers on all")
    p.add_argument("--publishers", type=int, default=5)
    p.add_argument("--topics", type=int, default=5)
    p.add_argument("--subscribers", type=int, default=1000)
    p.add_argument(
        "--rate",
        type=_rates,
        default=[20_000.0],
        help="total deliveries/s; a comma list runs a ladder",
    )
    _common(p)
    p = sub.add_parser("p2p", help="N publisher/subscriber pairs, one topic each")
    p.add_argument("--pairs", type=int, default=2000)
    p.add_argument(
        "--rate",
        type=_rates,
        default=[10_000.0],
        help="total messages/s; a comma list runs a ladder",
    )
    _common(p)
    p = sub.add_parser("persistence", help="p2p with persistent sessions, at rising rates")
    p.add_argument("--pairs", type=int, default=2000)
    p.add_argument(
        "--rate",
        type=_rates,
        default=[5_000.0],
        help="total messages/s; a comma list runs a ladder",
    )
    p.add_argument("--session-expiry", type=int, default=3600, help="seconds")
    _common(p)
    p = sub.add_parser("fanin", help="P publishers at r msg/s to a $share group of S")
    p.add_argument("--publishers", type=int, default=2000)
    p.add_argument("--subscribers", type=int, default=50)
    p.add_argument("--rate-per-publisher", type=float, default=1.0)
    _common(p)
    p = sub.add_parser("connections", help="C clients connecting at R/s, then holding")
    p.add_argument("--clients", type=int, default=5000)
    p.add_argument("--rate", type=float, default=1000.0, help="connections per second")
    p.add_argument("--hold", type=float, default=5.0, help="seconds to hold after connecting")
    p.add_argument(
        "--ladder",
        type=_rates,
        default=None,
        help="comma list of rates: report held / knee / saturated",
    )
    _common(p)
    p = sub.add_parser("migration", help="kill -9 a persistent session's node, reconnect elsewhere")
    p.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="HOST:PORT",
        required=True,
        help="cluster nodes A (publisher), B (live subscriber), C (killed), D (reconnect)",
    )
    p.add_argument("--victim-pid", type=int, default=None, help="node C's PID (default: lookup)")
    p.add_argument("--messages", type=int, default=2000)
    p.add_argument("--rate", type=float, default=100.0, help="messages/s")
    p.add_argument("--reconnect-after", type=float, default=3.0, help="seconds after the kill")
    p.add_argument("--mqtt", choices=("5", "3.1.1"), default="5")
    p.add_argument("--json", default=None, metavar="PATH", help="JSON line ('-' = stdout)")
    p = sub.add_parser(
        "survivability", help="steady persistent p2p while one node is killed and restarted"
    )
    add_survivability_arguments(p)
    return parser


@dataclass(frozen=True, slots=True)
class Step:
    """One run's scenario parameters: a rate ladder has one step per rate."""

    rate: float


def _steps(args: argparse.Namespace) -> list[Step]:
    if args.scenario == "connections":
        return [Step(r) for r in (args.ladder or [args.rate])]
    if args.scenario == "fanin":
        return [Step(args.rate_per_publisher)]
    return [Step(r) for r in args.rate]


def build_plan(
    args: argparse.Namespace, target: Target, options: CommonOptions, step: Step
) -> ScenarioPlan:
    if args.scenario == "fanout":
        return fanout(
            target,
            options,
            publishers=args.publishers,
            topics=args.topics,
            subscribers=args.subscribers,
            rate=step.rate,
        )
    if args.scenario == "p2p":
        return p2p(target, options, pairs=args.pairs, rate=step.rate)
    if args.scenario == "persistence":
        return persistence(
            target, options, pairs=args.pairs, rate=step.rate, session_expiry=args.session_expiry
        )
    if args.scenario == "fanin":
        return fanin(
            target,
            options,
            publishers=args.publishers,
            subscribers=args.subscribers,
            rate_per_publisher=step.rate,
        )
    return connections(target, options, clients=args.clients, rate=step.rate, hold_s=args.hold)


@contextlib.contextmanager
def _target(args: argparse.Namespace, kind: str) -> Iterator[tuple[Target, tuple[int, ...], str]]:
    if kind == "mosquitto":
        with MosquittoProcess() as mosquitto:
            yield (
                Target("127.0.0.1", mosquitto.port, "mosquitto"),
                (mosquitto.pid,),
                mosquitto.version(),
            )
    elif args.node:
        host, port = _node(args.node[0])
        yield Target(host, port, args.label), tuple(args.broker_pid), ""
    else:
        yield Target(args.host, args.port, args.label), tuple(args.broker_pid), ""


def _options(args: argparse.Namespace) -> CommonOptions:
    return CommonOptions(
        workers=args.workers,
        protocol=MQTT_V5 if args.mqtt == "5" else MQTT_V311,
        qos=args.qos,
        duration_s=args.duration,
        warmup_s=args.warmup,
        drain_s=args.drain,
        interval_s=args.interval,
        source_addresses=args.sources,
        setup_connect_rate=args.setup_rate,
        broker_pids=tuple(args.broker_pid),
        redis_url=args.redis_url,
        nodes=tuple(Target(*_node(n), args.label) for n in args.node),
    )


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.scenario == "survivability":
        return survivability_main(args)
    if args.scenario == "migration":
        return _migration(args)
    kinds = ["mosquitto"] if args.target == "mosquitto" else ["address"]
    if args.compare == "mosquitto" and "mosquitto" not in kinds:
        kinds.append("mosquitto")
    options = _options(args)
    json_stream: IO[str] | None = None
    text_out: IO[str] = sys.stdout
    if args.json == "-":
        json_stream = sys.stdout
        text_out = sys.stderr  # stdout carries only JSON lines
    elif args.json:
        json_stream = Path(args.json).open("a", encoding="utf-8")  # noqa: SIM115
    all_runs: list[list[RunResult]] = []

    def show(label: str, point: IntervalPoint) -> None:
        if not args.quiet:
            print(progress_line(label, point), file=sys.stderr, flush=True)

    try:
        for step in _steps(args):
            runs: list[RunResult] = []
            for kind in kinds:
                with _target(args, kind) as (target, pids, version):
                    # the cluster's nodes are for the address target, not for Mosquitto
                    run_options = options if kind == "address" else replace(options, nodes=())
                    plan = build_plan(args, target, run_options, step)
                    print(f"== {target.label} {plan.name}: {plan.description}", file=sys.stderr)
                    result = run_plan(
                        plan, run_options, label=target.label, broker_pids=pids, progress=show
                    )
                    result.version = version
                runs.append(result)
                time.sleep(args.pause)
            all_runs.append(runs)
            print(render_table(runs) + "\n", file=text_out, flush=True)
            if json_stream is not None:
                write_json_lines(runs, json_stream)
                json_stream.flush()
    except BenchError as exc:
        print(f"xmq bench: {exc}", file=sys.stderr)
        return 1
    finally:
        if json_stream is not None and json_stream is not sys.stdout:
            json_stream.close()
    if len(all_runs) > 1:
        summarize = ladder_verdicts if args.scenario == "connections" else rate_ladder_summary
        print(summarize(all_runs), file=text_out)
    if args.charts:
        from xmq.bench.charts import write_charts

        for path in write_charts(all_runs, Path(args.charts)):
            print(f"chart: {path}", file=text_out)
    return 0


def _node(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return (host or "127.0.0.1", int(port))


def _migration(args: argparse.Namespace) -> int:
    import dataclasses

    import uvloop

    from xmq.bench.migration import MigrationOptions, render_migration, run_migration

    options = MigrationOptions(
        nodes=tuple(_node(n) for n in args.node),
        victim_pid=args.victim_pid,
        messages=args.messages,
        rate=args.rate,
        protocol=MQTT_V5 if args.mqtt == "5" else MQTT_V311,
        reconnect_after_s=args.reconnect_after,
    )
    try:
        result = uvloop.run(run_migration(options))
    except (OSError, RuntimeError, ValueError, TimeoutError) as exc:
        print(f"xmq bench migration: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    text_out = sys.stderr if args.json == "-" else sys.stdout
    print(render_migration(result), file=text_out)
    if args.json:
        record = {"type": "migration", **dataclasses.asdict(result), "passed": result.passed}
        emit_records([record], args.json)
    return 0 if result.passed else 3


def run(argv: Sequence[str] | None = None) -> int:
    return main(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    raise SystemExit(run())
