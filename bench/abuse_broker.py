"""The broker under attack in ``bench/abuse_bench.py``: an ``xmq serve`` subprocess.

Its listener ports read from its output, its RSS, ``/metrics`` and ``/healthz`` over HTTP, the
tracebacks in its log; ``cluster_config`` makes it a member of a cluster.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

_LISTENING = re.compile(r"^xmq: listening (\S+) \S+ \S+:(\d+)$")
_SAMPLE = re.compile(r"^([a-z_]+)(\{[^}]*\})? (\S+)$")
BUDGET = 64 * 1024 * 1024
"""``limits.memory_budget_bytes`` of every broker the bench starts."""


class Broker:
    """A broker subprocess with its listener ports."""

    def __init__(self, config: str, node_id: str | None = None) -> None:
        self.config = config
        self.dir = tempfile.TemporaryDirectory(prefix="xmq-abuse-")
        path = Path(self.dir.name) / "xmq.yaml"
        path.write_text(config)
        self.log_path = Path(self.dir.name) / "broker.log"
        env = dict(os.environ, XMQ_SYS__INTERVAL_S="0", XMQ_METRICS__PORT="0")
        if node_id is not None:  # a cluster member (``cluster_config``)
            env["XMQ_NODE_ID"] = node_id
        env["XMQ_LIMITS__MEMORY_BUDGET_BYTES"] = str(BUDGET)
        env["XMQ_METRICS__HOST"] = "127.0.0.1"
        args = [sys.executable, "-m", "xmq", "serve", "--config", str(path)]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=self.log_path.open("wb"), env=env, text=True
        )
        self.ports: dict[str, int] = {}
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 30
        while "metrics" not in self.ports and time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"broker did not start:\n{self.log_path.read_text()}")
            match = _LISTENING.match(line.strip())
            if match:
                self.ports[match.group(1)] = int(match.group(2))
        self.port = self.ports["mqtt"]

    def rss(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def http(self, path: str, timeout: float = 2.0) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.ports['metrics']}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, ""
        except OSError:
            return 0, ""  # no answer in time

    def metrics(self) -> dict[str, float]:
        _, body = self.http("/metrics", timeout=10)
        samples: dict[str, float] = {}
        for line in body.splitlines():
            match = _SAMPLE.match(line)
            if match:
                samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
        return samples

    def tracebacks(self) -> int:
        return self.log_path.read_text(errors="replace").count("Traceback")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.dir.cleanup()


def cluster_config(redis_url: str) -> str:
    """The configuration section that makes a bench broker a member of one cluster."""
    return (
        f"cluster: {{redis_url: '{redis_url}', name: abuse, link_host: 127.0.0.1, link_port: 0}}\n"
    )
