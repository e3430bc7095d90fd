"""``xmq cluster up`` starts a working local cluster; ``xmq cluster status`` reads Redis."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest

from tests.support.cluster_nodes import routed
from tests.support.paho_client import PahoClient

_NODE = re.compile(r"^xmq: node-(\d+) mqtt 127\.0\.0\.1:(\d+)$")
_REDIS = re.compile(r"^xmq: redis (redis://\S+) ")


@pytest.mark.parametrize(
    ("workers", "members"),
    [
        (1, ["node-1", "node-2"]),
        (2, ["node-1-0", "node-1-1", "node-2-0", "node-2-1"]),
    ],
    ids=["one-process-per-node", "two-workers-per-node"],
)
def test_cluster_up_and_status(uid: str, workers: int, members: list[str]) -> None:
    """Node lines as scripts/bench-cluster reads them; with workers each node is a supervisor
    whose workers share its MQTT port and are all members."""
    command = [sys.executable, "-m", "xmq", "cluster", "up", "--nodes", "2", "--port", "0"]
    proc = subprocess.Popen(
        [*command, "--workers", str(workers)],
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
        assert ports[1] != ports[2]
        subs = [PahoClient(ports[2], f"{uid}-s{n}") for n in range(4 * workers)]
        for sub in subs:  # with workers, they land on both workers of node-2
            sub.connect()
            sub.subscribe(f"{uid}/cli", 1)
        for sub in subs:
            routed(ports[2], ports[1], f"{uid}/cli", sub)
        for sub in subs:
            sub.disconnect()
        status = subprocess.run(
            [sys.executable, "-m", "xmq", "cluster", "status", "--redis-url", redis_url],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert f"cluster local: {len(members)} members" in status.stdout
        for member in members:
            assert re.search(rf"^{member}\s+alive", status.stdout, re.MULTILINE), status.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
