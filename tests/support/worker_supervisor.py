"""Run ``xmq serve`` with ``workers: N`` (a supervisor and its workers) for integration tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

_WORKER = re.compile(
    r"^xmq: worker (\d+) node (\S+) pid (\d+) link (\S+) metrics \S+:(\d+) mqtt \S+:(\d+)"
)
_SUPERVISOR = re.compile(r"^xmq: supervisor pid \d+ workers \d+ health \S+:(\d+)$")


@dataclass(frozen=True)
class WorkerLine:
    """What a worker printed once it was serving."""

    index: int
    node_id: str
    pid: int
    link: str
    metrics_port: int
    mqtt_port: int


class WorkerSupervisor:
    """An ``xmq serve`` supervisor process; ``started`` lists every worker (re)start seen."""

    def __init__(self, config_yaml: str) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="xmq-workers-")
        path = Path(self._tmp.name) / "xmq.yaml"
        path.write_text(config_yaml)
        self.log_path = Path(self._tmp.name) / "stderr.log"
        self._log = self.log_path.open("wb")
        env = dict(os.environ)
        env.setdefault("XMQ_SYS__INTERVAL_S", "0")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "xmq", "serve", "--config", str(path)],
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            text=True,
        )
        self.started: list[WorkerLine] = []
        self.health_port = 0
        """The supervisor's own HTTP port (the pod's probes), once printed."""
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if supervisor := _SUPERVISOR.match(line.strip()):
                self.health_port = int(supervisor.group(1))
            match = _WORKER.match(line.strip())
            if match:
                index, node, pid, link, metrics, mqtt = match.groups()
                entry = WorkerLine(int(index), node, int(pid), link, int(metrics), int(mqtt))
                with self._changed:
                    self.started.append(entry)
                    self._changed.notify_all()

    def current(self) -> dict[int, WorkerLine]:
        """The latest start of each worker index."""
        with self._changed:
            return {entry.index: entry for entry in self.started}

    def wait_started(self, count: int, timeout: float = 30.0) -> dict[int, WorkerLine]:
        """Wait until ``count`` worker starts have been seen in total; return the latest ones."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.started) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.proc.poll() is not None:
                    raise RuntimeError(f"workers did not start; log:\n{self.log()}")
                self._changed.wait(min(remaining, 0.5))
        return self.current()

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)

    def stop(self) -> None:
        """SIGTERM the supervisor (SIGKILL it and every worker if that does not work)."""
        try:
            self.signal(signal.SIGTERM)
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        finally:
            for entry in self.current().values():
                if process_alive(entry.pid):
                    os.kill(entry.pid, signal.SIGKILL)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._log.close()
            self._tmp.cleanup()


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
