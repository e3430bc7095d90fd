"""Start a real ``xmq serve`` process for tests and read the port it bound."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

KEEP_LOGS_ENV = "XMQ_TEST_KEEP_LOGS"
_LISTENING = re.compile(r"^xmq: listening (\S+) (\S+) (\S+):(\d+)$")


class BrokerProcess:
    """A broker subprocess; ``port`` is the resolved port of its first listener."""

    def __init__(
        self,
        config_yaml: str | None = None,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        wrapper: Sequence[str] = (),
    ) -> None:
        """``host``: the MQTT listener's address; ``wrapper``: argv the command runs under,
        which must exec it (e.g. ``ip netns exec NS``: ``proc.pid`` stays the broker's)."""
        self._tmp = tempfile.TemporaryDirectory(prefix="xmq-test-")
        args = [*wrapper, sys.executable, "-m", "xmq", "serve", "--host", host, "--port", "0"]
        if config_yaml is not None:
            path = Path(self._tmp.name) / "xmq.yaml"
            path.write_text(config_yaml)
            args += ["--config", str(path)]
        args += list(extra_args)
        full_env = dict(os.environ)
        full_env.setdefault("XMQ_SYS__INTERVAL_S", "0")
        full_env.setdefault("XMQ_METRICS__PORT", "0")
        full_env.update(env or {})
        self.log_path = Path(self._tmp.name) / "broker.log"
        self.name = full_env.get("XMQ_NODE_ID", "broker")
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=self._log, env=full_env, text=True
        )
        self.ports: dict[str, int] = {}
        self.port = self._wait_ready()
        self._drain = threading.Thread(target=self._drain_stdout, daemon=True)
        self._drain.start()

    def _wait_ready(self, timeout: float = 20.0) -> int:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        first = 0
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            match = _LISTENING.match(line.strip())
            if match:
                self.ports[match.group(1)] = int(match.group(4))
                first = first or int(match.group(4))
                return first
        log = self.log()
        self.stop()
        raise RuntimeError(f"broker did not start; log:\n{log}")

    def _drain_stdout(self) -> None:
        stdout = self.proc.stdout
        if stdout is None:
            return
        for line in stdout:
            match = _LISTENING.match(line.strip())
            if match:
                self.ports[match.group(1)] = int(match.group(4))

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int) -> str:
        """The log's last ``lines`` (empty once ``stop`` removed it)."""
        if self._log.closed or not self.log_path.exists():
            return ""
        return "\n".join(self.log().splitlines()[-lines:])

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; return the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                self.terminate()
        except subprocess.TimeoutExpired:
            self.kill()
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._log.close()
            self._keep_log()
            self._tmp.cleanup()

    def _keep_log(self) -> None:
        """With ``XMQ_TEST_KEEP_LOGS=DIR`` the log is copied there (``<node id>-<pid>.log``)
        before its temporary directory goes (``XMQ_LOG__LEVEL=INFO``: more than warnings)."""
        keep = os.environ.get(KEEP_LOGS_ENV)
        if keep and self.log_path.exists():
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.log_path, Path(keep) / f"{self.name}-{self.proc.pid}.log")
