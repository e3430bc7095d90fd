"""Start a tuned Mosquitto (Debian package) on a free loopback port, for ``--compare``."""

from __future__ import annotations

import getpass
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

MOSQUITTO_CANDIDATES = ("/usr/sbin/mosquitto", "mosquitto")


def find_mosquitto() -> str | None:
    for candidate in MOSQUITTO_CANDIDATES:
        found = shutil.which(candidate) if "/" not in candidate else candidate
        if found and Path(found).exists():
            return found
    return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def tuned_config(port: int, host: str = "127.0.0.1", max_inflight: int = 0) -> str:
    """Settings for a fair throughput run: nothing queued is dropped, no disk, Nagle off."""
    return "\n".join(
        [
            f"listener {port} {host}",
            "allow_anonymous true",
            "persistence false",
            "set_tcp_nodelay true",
            "max_queued_messages 1000000",
            "max_queued_bytes 0",
            f"max_inflight_messages {max_inflight}",
            "max_connections -1",
            "max_keepalive 65535",
            "log_dest stderr",
            "log_type error",
            "log_type warning",
            "",
        ]
    )


class MosquittoProcess:
    """Context manager: a private Mosquitto; ``pid`` and ``port`` are set once started."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_inflight: int = 0,
        binary: str | None = None,
        wrapper: Sequence[str] = (),
    ) -> None:
        """``wrapper``: a command prefix Mosquitto runs under (``valgrind --tool=callgrind``)."""
        self.host = host
        self.wrapper = tuple(wrapper)
        self.port = port
        self.max_inflight = max_inflight
        self.binary = binary or find_mosquitto()
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("mosquitto is not running")
        return self._process.pid

    @property
    def log_path(self) -> Path | None:
        return Path(self._dir.name) / "mosquitto.log" if self._dir else None

    def version(self) -> str:
        if not self.binary:
            return "missing"
        out = subprocess.run(
            [self.binary, "-h"], capture_output=True, text=True, timeout=5, check=False
        )
        first = (out.stdout or out.stderr).splitlines()
        return first[0].replace("mosquitto version ", "") if first else "unknown"

    def start(self, timeout_s: float = 10.0) -> None:
        if not self.binary:
            raise RuntimeError("mosquitto not found: run scripts/setup-system")
        self._dir = tempfile.TemporaryDirectory(prefix="xmq-bench-mosquitto-")
        if not self.port:
            self.port = free_port(self.host)
        config = Path(self._dir.name) / "mosquitto.conf"
        text = tuned_config(self.port, self.host, self.max_inflight)
        if self.wrapper:
            # Started as root, Mosquitto drops to its own user: a tracer run by the invoking
            # user (callgrind_control's vgdb) could no longer reach it.
            text += f"user {getpass.getuser()}\n"
        config.write_text(text)
        log = (Path(self._dir.name) / "mosquitto.log").open("wb")
        self._process = subprocess.Popen(
            [*self.wrapper, self.binary, "-c", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"mosquitto exited: {self._read_log()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("mosquitto did not start listening in time")

    def _read_log(self) -> str:
        path = self.log_path
        return path.read_text(errors="replace")[-2000:] if path and path.exists() else ""

    def stop(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        self._process = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> MosquittoProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
