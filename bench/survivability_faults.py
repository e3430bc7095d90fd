"""Run ``xmq bench survivability`` once per fault, each against a fresh cluster; print a table.

Starts, per fault, a throw-away ``redis-server`` (``appendonly yes``, ``appendfsync always``:
an acknowledged write survives the ``redis-restart`` SIGKILL) and N ``xmq serve`` nodes on
loopback (``lease_ttl_s``, ``max_queued_writes`` as given; each serves its HTTP endpoint), runs
the bench CLI against them with the last node as the victim (``drain``: the last node, then
``--drains`` - 1 more, last to first, ``--fault-for`` s apart), stops everything and goes on
with the next fault. ``link-reset`` needs root (``ss -K``). The table has, per fault: messages
sent, received, missing, QoS 1 and QoS 2 duplicates, sessions lost, verdict.

    .venv/bin/python bench/survivability_faults.py [--faults kill,drain,...] [--nodes 3] \\
        [--pairs 12] [--qos2-pairs 6] [--rate 120] [--duration 10] [--fault-at 2] \\
        [--fault-for 4] [--lease-ttl 3] [--max-queued-writes 0] [--drains 1] \\
        [--reconnect next|random] [--out DIR]

The JSON lines of every run (``--json``) and each node's log are kept in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from xmq.bench.migration import pid_listening_on
from xmq.bench.survivability_faults import FAULTS


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_listening(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not listen within 30 s") from None
            time.sleep(0.1)


class Cluster:
    """Redis and the nodes of one run (``commands``: each node's command line)."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []
        self.redis_url = ""
        self.nodes: list[int] = []
        self.commands: list[list[str]] = []
        self.http_ports: list[int] = []


@contextmanager
def cluster(args: argparse.Namespace, out: Path, name: str) -> Iterator[Cluster]:
    started = Cluster()
    data = Path(tempfile.mkdtemp(prefix="xmq-survfault-"))
    redis_port = free_port()
    try:
        redis = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--bind", "127.0.0.1"]
            + ["--port", str(redis_port), "--save", "", "--appendonly", "yes"]
            + ["--appendfsync", "always", "--dir", str(data)],
            cwd=data,  # a restarted one too (the bench keeps the cwd): how it is found again
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started.processes.append(redis)
        wait_listening(redis_port, redis, "redis-server")
        started.redis_url = f"redis://127.0.0.1:{redis_port}/0"
        for index in range(1, args.nodes + 1):
            port = free_port()
            http = free_port()
            config = data / f"node-{index}.yaml"
            config.write_text(
                f"node_id: node-{index}\n"
                "listeners:\n"
                f"  - {{name: mqtt, host: 127.0.0.1, port: {port}}}\n"
                "cluster:\n"
                f"  redis_url: {started.redis_url}\n"
                f"  name: {name}\n"
                f"  lease_ttl_s: {args.lease_ttl}\n"
                "  link_host: 127.0.0.1\n"
                "  link_port: 0\n"
                "persistence:\n"
                f"  max_queued_writes: {args.max_queued_writes}\n"
                + f"metrics: {{enabled: true, host: 127.0.0.1, port: {http}}}\n"
                + f"log: {{level: {args.log_level}}}\n"
            )
            command = [sys.executable, "-m", "xmq", "serve", "--config", str(config)]
            log = (out / f"{name}-node-{index}.log").open("ab")
            node = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
            started.processes.append(node)
            started.nodes.append(port)
            started.commands.append(command)
            started.http_ports.append(http)
        for port, node in zip(started.nodes, started.processes[1:], strict=True):
            wait_listening(port, node, f"node on {port}")
        time.sleep(args.lease_ttl)  # the nodes see each other
        yield started
    finally:
        # a Redis the bench started again (redis-restart) works in our data dir: stop it
        pid = pid_listening_on(redis_port)
        if pid is not None and psutil.Process(pid).cwd() == str(data):
            os.kill(pid, signal.SIGTERM)
        for process in reversed(started.processes):
            if process.poll() is None:
                process.terminate()
        for process in started.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        shutil.rmtree(data, ignore_errors=True)


def run_fault(args: argparse.Namespace, fault: str, out: Path) -> dict[str, Any]:
    name = f"sf{int(time.time()) % 100000}-{fault}"
    jsonl = out / f"{name}.jsonl"
    with cluster(args, out, name) as started:
        victim = f"127.0.0.1:{started.nodes[-1]}"
        command = [sys.executable, "-m", "xmq", "bench", "survivability"]
        for port in started.nodes:
            command += ["--node", f"127.0.0.1:{port}"]
        command += ["--kill-node", victim, "--fault", fault, "--fault-for", str(args.fault_for)]
        command += ["--pairs", str(args.pairs), "--qos2-pairs", str(args.qos2_pairs)]
        command += ["--rate", str(args.rate), "--duration", str(args.duration)]
        command += ["--kill-at", str(args.fault_at), "--restart-after", "3", "--drain", "40"]
        command += ["--redis-url", started.redis_url, "--json", str(jsonl)]
        if fault == "kill":
            command += ["--restart-cmd", " ".join(started.commands[-1])]
        if fault == "drain":
            command += ["--victim-http", f"127.0.0.1:{started.http_ports[-1]}"]
            for http in reversed(started.http_ports[-args.drains : -1]):  # the one before, ...
                command += ["--also-drain", f"127.0.0.1:{http}"]
        command += ["--reconnect", args.reconnect]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        (out / f"{name}.txt").write_text(done.stdout + done.stderr)
        # the node the bench started again (kill) runs on: stop it (our config, our pid)
        pid = pid_listening_on(started.nodes[-1])
        if pid is not None and started.commands[-1][-1] in " ".join(psutil.Process(pid).cmdline()):
            os.kill(pid, signal.SIGTERM)
    summary: dict[str, Any] = {"fault": fault, "exit": done.returncode, "command": command}
    if jsonl.exists():
        for line in jsonl.read_text().splitlines():
            record = json.loads(line)
            if record.get("type") == "summary":
                summary.update(record)
    else:
        summary["error"] = (done.stderr or done.stdout)[-500:]
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=12)
    parser.add_argument("--qos2-pairs", type=int, default=6)
    parser.add_argument("--rate", type=float, default=120.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--fault-at", type=float, default=2.0)
    parser.add_argument("--fault-for", type=float, default=4.0)
    parser.add_argument("--lease-ttl", type=float, default=3.0)
    parser.add_argument("--max-queued-writes", type=int, default=0)
    parser.add_argument("--drains", type=int, default=1, help="drain: how many nodes, in turn")
    parser.add_argument("--reconnect", choices=("next", "random"), default="next")
    parser.add_argument("--log-level", default="WARNING", help="the nodes' (logs in --out)")
    parser.add_argument("--out", type=Path, default=Path(".bench-out/survivability-faults"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print("| fault | sent | received | missing | QoS 1 dup | QoS 2 dup | sessions lost | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    failed = 0
    for fault in args.faults.split(","):
        s = run_fault(args, fault, args.out)
        if "sent" not in s:
            print(f"| {fault} | error: {s.get('error', '')!r} |||||||", flush=True)
            failed += 1
            continue
        dup2 = s.get("qos2_duplicates", 0)
        verdict = "PASS" if s["passed"] else "FAIL"
        failed += not s["passed"]
        print(
            f"| {fault} | {s['sent']:,} | {s['received']:,} | {s['missing']} | "
            f"{s['duplicates'] - dup2} | {dup2} | {s['sessions_lost']} | {verdict} "
            f"({s.get('fault_note', '')}) |",
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
