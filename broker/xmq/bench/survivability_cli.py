"""``xmq bench survivability``: arguments and entry point."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from xmq.bench.packets import MQTT_V5, MQTT_V311
from xmq.bench.survivability_faults import FAULTS


def _node(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return (host or "127.0.0.1", int(port))


def add_survivability_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="cluster node (repeat; at least two): subscriber n on node n mod N, "
        "publisher n on node n+1 mod N",
    )
    p.add_argument(
        "--kill-node",
        default=None,
        metavar="HOST:PORT",
        help="the node to kill with SIGKILL (one of --node; default: the last)",
    )
    p.add_argument(
        "--fault",
        choices=FAULTS,
        default="kill",
        help="what strikes at --kill-at: kill (SIGKILL the node, --restart-cmd), drain (POST "
        "/admin/drain to --victim-http), stop (SIGSTOP the node --fault-for s), redis-stop "
        "(SIGSTOP Redis --fault-for s; needs --redis-url), redis-restart (SIGKILL Redis and "
        "start it again; needs --redis-url), link-reset (ss -K the node's links, root), "
        "takeover (a tenth of the subscribers connect to two nodes at once), partition "
        "(--cut-cmd, then --heal-cmd --fault-for s later)",
    )
    p.add_argument("--fault-for", type=float, default=5.0, help="seconds of stop / redis-stop")
    p.add_argument(
        "--victim-http", default="", metavar="HOST:PORT", help="the node's HTTP port (drain)"
    )
    p.add_argument(
        "--also-drain",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="drain: the HTTP port of another node to drain --fault-for s after the previous "
        "one (repeat: a roll)",
    )
    p.add_argument(
        "--reconnect",
        choices=("next", "random"),
        default="next",
        help="where a client goes when its connection breaks: the next node, or a random other "
        "one (as behind a load balancer)",
    )
    p.add_argument("--cut-cmd", default="", metavar="CMD", help="partition: cuts (shell words)")
    p.add_argument("--heal-cmd", default="", metavar="CMD", help="partition: heals (shell words)")
    p.add_argument("--victim-pid", type=int, default=None, help="its PID (default: by its port)")
    p.add_argument(
        "--restart-cmd",
        default="",
        metavar="CMD",
        help="command line that starts the killed node again (shell words; default: no restart)",
    )
    p.add_argument("--pairs", type=int, default=200, help="publisher/subscriber pairs")
    p.add_argument(
        "--qos2-pairs",
        type=int,
        default=None,
        metavar="N",
        help="how many of the pairs run at QoS 2 (default: half; the others at QoS 1); QoS 2 "
        "duplicates are reported apart and fail the run",
    )
    p.add_argument("--rate", type=float, default=1000.0, help="total messages/s")
    p.add_argument("--duration", type=float, default=30.0, help="seconds of publishing")
    p.add_argument("--kill-at", type=float, default=10.0, help="seconds after the start")
    p.add_argument("--restart-after", type=float, default=5.0, help="seconds after the kill")
    p.add_argument("--interval", type=float, default=1.0, help="seconds per interval")
    p.add_argument("--drain", type=float, default=20.0, help="seconds to wait for the rest")
    p.add_argument("--session-expiry", type=int, default=3600)
    p.add_argument("--mqtt", choices=("5", "3.1.1"), default="5")
    p.add_argument(
        "--broker-pid",
        type=int,
        action="append",
        default=[],
        metavar="PID",
        help="broker process to sample (repeat; default: the processes on the nodes' ports)",
    )
    p.add_argument("--redis-url", default=None, help="also sample this Redis (CPU, commands/s)")
    p.add_argument("--json", default=None, metavar="PATH", help="JSON lines ('-' = stdout)")
    p.add_argument("--charts", default=None, metavar="DIR", help="write a PNG chart here")


def survivability_main(args: argparse.Namespace) -> int:
    import uvloop

    from xmq.bench.report import emit_records
    from xmq.bench.survivability import SurvivabilityOptions, run_survivability
    from xmq.bench.survivability_faults import FaultOptions
    from xmq.bench.survivability_result import render_survivability, write_survivability_chart

    nodes = tuple(_node(n) for n in args.node)
    if len(nodes) < 2:
        print("xmq bench survivability: give at least two --node HOST:PORT", file=sys.stderr)
        return 2
    if args.qos2_pairs is not None and not 0 <= args.qos2_pairs <= args.pairs:
        print("xmq bench survivability: --qos2-pairs must be 0..--pairs", file=sys.stderr)
        return 2
    kill = len(nodes) - 1
    if args.kill_node is not None:
        if _node(args.kill_node) not in nodes:
            print("xmq bench survivability: --kill-node must be one of --node", file=sys.stderr)
            return 2
        kill = nodes.index(_node(args.kill_node))
    options = SurvivabilityOptions(
        nodes=nodes,
        kill_node=kill,
        victim_pid=args.victim_pid,
        restart_cmd=tuple(shlex.split(args.restart_cmd)),
        pairs=args.pairs,
        rate=args.rate,
        duration_s=args.duration,
        kill_at_s=args.kill_at,
        restart_after_s=args.restart_after,
        interval_s=args.interval,
        drain_s=args.drain,
        session_expiry=args.session_expiry,
        protocol=MQTT_V5 if args.mqtt == "5" else MQTT_V311,
        broker_pids=tuple(args.broker_pid),
        redis_url=args.redis_url,
        fault=FaultOptions(
            args.fault,
            args.fault_for,
            args.victim_http,
            tuple(args.also_drain),
            tuple(shlex.split(args.cut_cmd)),
            tuple(shlex.split(args.heal_cmd)),
        ),
        reconnect=args.reconnect,
        qos2_pairs=args.pairs // 2 if args.qos2_pairs is None else args.qos2_pairs,
    )
    try:
        result = uvloop.run(run_survivability(options))
    except (OSError, RuntimeError, ValueError, TimeoutError) as exc:
        print(f"xmq bench survivability: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    text_out = sys.stderr if args.json == "-" else sys.stdout
    print(render_survivability(result), file=text_out)
    if args.json:
        emit_records([*result.interval_records(), result.summary_record()], args.json)
    if args.charts:
        print(f"chart: {write_survivability_chart(result, Path(args.charts))}", file=text_out)
    return 0 if result.passed else 3
