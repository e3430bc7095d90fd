"""``xmq cluster up`` starts a working local cluster; ``xmq cluster status`` reads Redis."""

from __future__ import annotations

import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.cluster_nodes import routed
from tests.support.paho_client import PahoClient

_NODE = re.compile(r"^xmq: node-(\d+) mqtt 127\.0\.0\.1:(\d+)$")
_REDIS = re.compile(r"^xmq: redis (redis://\S+) ")


def _read_lines(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    """The process's stdout, line by line, into ``lines`` (None at its end): the test waits on
    the queue with a deadline, where a ``readline()`` would block for ever on a hung process."""
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line)
    lines.put(None)


@pytest.mark.parametrize(
    ("workers", "members"),
    [
        (1, ["node-1", "node-2"]),
        (2, ["node-1-0", "node-1-1", "node-2-0", "node-2-1"]),
    ],
    ids=["one-process-per-node", "two-workers-per-node"],
)
def test_cluster_up_and_status(uid: str, workers: int, members: list[str], tmp_path: Path) -> None:
    """Node lines as scripts/bench-cluster reads them; with workers each node is a supervisor
    whose workers share its MQTT port and are all members."""
    command = [sys.executable, "-m", "xmq", "cluster", "up", "--nodes", "2", "--port", "0"]
    stderr = tmp_path / "cluster-up.stderr"
    with stderr.open("w") as errors:
        proc = subprocess.Popen(
            [*command, "--workers", str(workers), "--start-timeout", "60"],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(proc, lines), daemon=True)
    reader.start()
    printed: list[str] = []
    try:
        ports: dict[int, int] = {}
        redis_url = ""
        deadline = time.monotonic() + 90  # cluster up itself gives up after 60 s
        while len(ports) < 2:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no node lines in 90 s: {printed}\n{stderr.read_text()[-4000:]}")
            if line is None:
                pytest.fail(f"xmq cluster up exited: {printed}\n{stderr.read_text()[-4000:]}")
            printed.append(line.strip())
            if match := _REDIS.match(line.strip()):
                redis_url = match.group(1)
            if match := _NODE.match(line.strip()):
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
        reader.join(10)  # it ends at the process's end of output
        assert proc.stdout is not None
        proc.stdout.close()


def test_cluster_up_stops_a_node_that_does_not_listen_in_time(tmp_path: Path) -> None:
    """A node that hangs before it listens (here: its Redis is a socket that never answers) is
    reported and stopped after ``--start-timeout``; ``cluster up`` does not wait for ever."""
    with socket.socket() as silent:  # accepts (the backlog), never answers: a hung Redis
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        done = subprocess.run(
            [sys.executable, "-m", "xmq", "cluster", "up", "--nodes", "1", "--port", "0"]
            + ["--redis-url", url, "--start-timeout", "3"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1, done
    assert "node-1 did not listen within the start timeout" in done.stderr
