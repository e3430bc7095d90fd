"""``xmq cluster up`` starts a working local cluster; ``xmq cluster status`` reads Redis."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

from tests.support.cluster_nodes import routed
from tests.support.paho_client import PahoClient

_NODE = re.compile(r"^xmq: node-(\d+) mqtt 127\.0\.0\.1:(\d+)$")
_REDIS = re.compile(r"^xmq: redis (redis://\S+) ")


def test_cluster_up_and_status(uid: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "xmq", "cluster", "up", "--nodes", "2", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ports: dict[int, int] = {}
        redis_url = ""
        deadline = time.monotonic() + 30
        while len(ports) < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline().strip()
            if not line:
                assert proc.poll() is None, "xmq cluster up exited"
                continue
            if match := _REDIS.match(line):
                redis_url = match.group(1)
            if match := _NODE.match(line):
                ports[int(match.group(1))] = int(match.group(2))
        assert redis_url
        assert sorted(ports) == [1, 2]
        sub = PahoClient(ports[2], f"{uid}-s")
        sub.connect()
        sub.subscribe(f"{uid}/cli", 1)
        routed(ports[2], ports[1], f"{uid}/cli", sub)
        sub.disconnect()
        status = subprocess.run(
            [sys.executable, "-m", "xmq", "cluster", "status", "--redis-url", redis_url],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert "cluster local: 2 members" in status.stdout
        assert re.search(r"node-1\s+alive", status.stdout)
        assert re.search(r"node-2\s+alive", status.stdout)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
