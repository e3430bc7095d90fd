"""A cluster of separately started ``xmq serve`` processes on one private Redis, for the bench
scenarios that kill a node (``xmq cluster up`` stops every node when one dies)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from xmq.bench.mosquitto import free_port


@dataclass
class SeparateNodes:
    nodes: list[tuple[str, int]] = field(default_factory=list)
    """(host, MQTT port) of each node, in start order."""
    commands: list[list[str]] = field(default_factory=list)
    """The command line that started each node (to start it again)."""
    extra: list[subprocess.Popen[bytes]] = field(default_factory=list)
    """Processes the test started itself (e.g. a restarted node): stopped with the cluster."""


def wait_listening(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            pytest.fail(f"{what} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"{what} did not listen within 30 s")
            time.sleep(0.1)


@contextmanager
def separate_nodes(
    tmp_path: Path, count: int, name: str, lease_ttl_s: float
) -> Iterator[SeparateNodes]:
    """Start Redis and ``count`` nodes, wait one lease for them to see each other."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server missing: scripts/setup-system")
    processes: list[subprocess.Popen[bytes]] = []
    started = SeparateNodes()
    try:
        redis_port = free_port()
        redis = subprocess.Popen(
            [binary, "--bind", "127.0.0.1", "--port", str(redis_port), "--save", ""]
            + ["--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        processes.append(redis)
        wait_listening(redis_port, redis, "redis-server")
        for index in range(1, count + 1):
            port = free_port()
            config = tmp_path / f"node-{index}.yaml"
            config.write_text(
                f"node_id: node-{index}\n"
                "listeners:\n"
                f"  - {{name: mqtt, host: 127.0.0.1, port: {port}}}\n"
                "cluster:\n"
                f"  redis_url: redis://127.0.0.1:{redis_port}/0\n"
                f"  name: {name}\n"
                f"  lease_ttl_s: {lease_ttl_s}\n"
                "  link_port: 0\n"
                "metrics: {enabled: false}\n"
            )
            command = [sys.executable, "-m", "xmq", "serve", "--config", str(config)]
            started.commands.append(command)
            node = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            processes.append(node)
            started.nodes.append(("127.0.0.1", port))
        for (_, port), node in zip(started.nodes, processes[1:], strict=True):
            wait_listening(port, node, f"node on {port}")
        time.sleep(lease_ttl_s)  # let the nodes see each other
        yield started
    finally:
        processes += started.extra
        for process in reversed(processes):
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
