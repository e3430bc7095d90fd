"""``xmq cluster up`` (a local cluster on loopback) and ``xmq cluster status`` (from Redis)."""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from xmq.contract.keys import ClusterKeys
from xmq.contract.pod import REDIS_URL_ENV
from xmq.contract.records import NodeLease


def add_cluster_commands(commands: Any) -> None:
    """Register ``cluster up`` and ``cluster status`` on the ``xmq`` sub-command parser."""
    cluster = commands.add_parser("cluster", help="run or inspect a cluster")
    actions = cluster.add_subparsers(dest="cluster_command", required=True)
    up = actions.add_parser("up", help="start a local N-node cluster on loopback")
    up.add_argument("--nodes", type=int, default=3, help="broker nodes (default: %(default)s)")
    up.add_argument("--redis-url", help=f"Redis URL (default: ${REDIS_URL_ENV}, else start one)")
    up.add_argument("--name", default="local", help="cluster name (default: %(default)s)")
    up.add_argument(
        "--port",
        type=int,
        default=1884,
        help="MQTT port of node 1; node i uses port+i-1 (0: any free ports)",
    )
    up.add_argument(
        "--workers",
        type=int,
        default=1,
        help="broker processes per node, under one supervisor sharing the node's MQTT port "
        "(default: %(default)s); worker w of node i is node-<i>-<w>",
    )
    up.add_argument("--lease-ttl", type=float, default=10.0, help="lease TTL in seconds")
    up.add_argument("--max-queued-writes", type=int, default=0)
    up.add_argument(
        "--start-timeout",
        type=float,
        default=120.0,
        help="seconds for every node to listen, else stop them all and exit 1 "
        "(default: %(default)s)",
    )
    up.set_defaults(func=_up)
    status = actions.add_parser("status", help="members, leases and sessions from Redis")
    status.add_argument("--redis-url", help=f"Redis URL (default: ${REDIS_URL_ENV})")
    status.add_argument("--name", default="local", help="cluster name (default: %(default)s)")
    status.set_defaults(func=_status)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_redis(data_dir: str) -> tuple[subprocess.Popen[bytes], str]:
    """A throw-away redis-server on a free loopback port (``xmq cluster up``, the benches):
    the process and its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found: install the Debian package or give --redis-url")
    for _ in range(5):  # a free port can be taken before redis-server binds it: try another
        started = _try_redis(binary, data_dir, _free_port())
        if started is not None:
            return started
    raise SystemExit("redis-server did not start")


def _try_redis(binary: str, data_dir: str, port: int) -> tuple[subprocess.Popen[bytes], str] | None:
    """Start redis-server on ``port``; None when it exited (the port was taken meanwhile).

    The server answering on the port must be this one (its ``process_id``): another process
    may have bound the port between ``_free_port`` and redis-server's bind."""
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", data_dir]
        + ["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    deadline = time.monotonic() + 10
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if client.info("server").get("process_id") == proc.pid:
                    return proc, url
            except redis.RedisError:
                pass
            time.sleep(0.05)
    finally:
        client.close()
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    return None


class _NodeOutput:
    """A node's stdout, read on a thread of its own into a queue, so ``cluster up`` can wait for
    the node's listener lines with a deadline: a node that hangs before it listens is reported
    and stopped, never waited on for ever."""

    def __init__(self, node: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(node,), daemon=True).start()

    def _read(self, node: subprocess.Popen[str]) -> None:
        assert node.stdout is not None
        for line in node.stdout:
            self.lines.put(line)
        self.lines.put(None)  # the node closed its stdout: it exited

    def listening_address(
        self, name: str, workers: int, deadline: float, stopped: Callable[[], bool]
    ) -> str | None:
        """Wait until each of the node's workers printed its MQTT listener line (they share the
        port); return ``host:port``, or None once ``stopped`` (a signal). Other lines are passed
        on when the node has workers."""
        listening = 0
        while True:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if stopped():
                    return None
                if time.monotonic() > deadline:
                    raise SystemExit(f"{name} did not listen within the start timeout") from None
                continue
            if line is None:
                raise SystemExit(f"{name} exited before listening")
            if line.startswith("xmq: listening mqtt "):
                listening += 1
                if listening == workers:
                    return line.split()[-1]
            elif workers > 1:
                sys.stdout.write(line)  # the supervisor's and workers' own lines

    def relay(self) -> None:
        """Pass the node's further lines on to this process's stdout (on a thread)."""

        def run() -> None:
            while (line := self.lines.get()) is not None:
                sys.stdout.write(line)

        threading.Thread(target=run, daemon=True).start()


def _node_config(args: argparse.Namespace, url: str, index: int) -> str:
    # one process: node-<i>; workers: node-<i>-0 ... node-<i>-<W-1> (worker_plan's ids)
    node_id = f"node-{index}" if args.workers == 1 else f"node-{index}-0"
    return (
        f"node_id: {node_id}\n"
        f"workers: {args.workers}\n"
        "listeners:\n"
        f"  - {{name: mqtt, host: 127.0.0.1, port: {args.port + index - 1 if args.port else 0}}}\n"
        "cluster:\n"
        f"  redis_url: {url}\n"
        f"  name: {args.name}\n"
        f"  lease_ttl_s: {args.lease_ttl}\n"
        "  link_port: 0\n"
        f"persistence: {{max_queued_writes: {args.max_queued_writes}}}\n"
        "metrics: {enabled: false}\n"
    )


def _up(args: argparse.Namespace) -> int:
    if args.nodes < 1 or args.workers < 1:
        print("--nodes and --workers must be at least 1", file=sys.stderr)
        return 2
    work = tempfile.TemporaryDirectory(prefix="xmq-cluster-")
    redis_proc: subprocess.Popen[bytes] | None = None
    url = args.redis_url or os.environ.get(REDIS_URL_ENV)
    if not url:
        redis_proc, url = start_redis(work.name)
        print(f"xmq: redis {url} (appendonly yes, data in {work.name})", flush=True)
    nodes: list[subprocess.Popen[str]] = []
    stop = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        for index in range(1, args.nodes + 1):
            path = Path(work.name) / f"node-{index}.yaml"
            path.write_text(_node_config(args, url, index))
            command = [sys.executable, "-m", "xmq", "serve", "--config", str(path)]
            nodes.append(subprocess.Popen(command, stdout=subprocess.PIPE, text=True))
        outputs = [_NodeOutput(node) for node in nodes]
        deadline = time.monotonic() + args.start_timeout
        for index, output in enumerate(outputs, start=1):
            address = output.listening_address(
                f"node-{index}", args.workers, deadline, lambda: stop
            )
            if address is None:
                break
            print(f"xmq: node-{index} mqtt {address}", flush=True)
            output.relay()
        while not stop and all(node.poll() is None for node in nodes):
            time.sleep(0.2)
    finally:
        for node in nodes:
            if node.poll() is None:
                node.send_signal(signal.SIGTERM)
        for node in nodes:
            try:
                node.wait(15)
            except subprocess.TimeoutExpired:
                node.kill()
        if redis_proc is not None:
            redis_proc.terminate()
            redis_proc.wait(10)
        work.cleanup()
    return 0


def _status(args: argparse.Namespace) -> int:
    url = args.redis_url or os.environ.get(REDIS_URL_ENV)
    if not url:
        print(f"give --redis-url or set {REDIS_URL_ENV}", file=sys.stderr)
        return 2
    keys = ClusterKeys(args.name)
    client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=5)
    try:
        members = sorted(str(member) for member in client.smembers(keys.members()))
        print(f"cluster {args.name}: {len(members)} members")
        print(f"{'node':<20} {'state':<8} {'epoch':>6} {'ttl ms':>7} {'sessions':>8}  address")
        for node in members:
            raw = client.get(keys.lease(node))
            sessions = int(client.scard(keys.node_sessions(node)))
            if raw is None:
                print(f"{node:<20} {'dead':<8} {'-':>6} {'-':>7} {sessions:>8}  -")
                continue
            lease = NodeLease.from_json(str(raw))
            ttl = int(client.pttl(keys.lease(node)))
            print(
                f"{node:<20} {'alive':<8} {lease.epoch:>6} {ttl:>7} {sessions:>8}  {lease.address}"
            )
        owners = sum(1 for _ in client.scan_iter(f"{keys.prefix}session:owner:*", count=1000))
        orphaned = int(client.scard(keys.orphaned_sessions()))
        print(f"sessions owned: {owners}, orphaned: {orphaned}")
    except redis.RedisError as error:
        print(f"redis error: {error}", file=sys.stderr)
        return 1
    finally:
        client.close()
    return 0
