"""A throw-away redis-server (Debian package) on a free loopback port, for tests.

The server can be paused (SIGSTOP, an outage that keeps the data) and resumed, and its command
statistics read. Its clients answer ``bytes``, or ``str`` with ``decode_responses=True``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """A running redis-server process."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        host: str,
        port: int,
        decode_responses: bool = False,
        args: list[str] | None = None,
    ) -> None:
        self.proc = proc
        self.host = host
        self.port = port
        self.decode_responses = decode_responses
        self.args = args or []

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(
            host=self.host,
            port=self.port,
            socket_timeout=10,
            decode_responses=self.decode_responses,
        )

    def pause(self) -> None:
        """SIGSTOP: Redis stops answering but keeps its data (an outage)."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def restart(self, down_s: float = 0.0) -> None:
        """SIGKILL, then start again on the same port and data dir (from the AOF when
        ``appendonly``), ``down_s`` seconds later; return once it answers (not loading)."""
        self.proc.kill()
        self.proc.wait(10)
        time.sleep(down_s)
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_answering(self)

    def command_calls(self) -> dict[str, int]:
        """``INFO commandstats`` as command name -> calls."""
        client = self.client()
        try:
            stats = client.info("commandstats")
        finally:
            client.close()
        return {
            name.removeprefix("cmdstat_"): int(value["calls"])
            for name, value in stats.items()
            if isinstance(value, dict)
        }


def wait_answering(server: RedisServer, timeout: float = 10.0) -> None:
    """Wait until the server answers PING (a server loading its AOF answers ``-LOADING``)."""
    deadline = time.monotonic() + timeout
    client = server.client()
    try:
        while True:
            try:
                client.ping()
                return
            except (redis.ConnectionError, redis.BusyLoadingError):
                if server.proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    finally:
        client.close()


@contextmanager
def running_redis(
    appendonly: bool = False,
    decode_responses: bool = False,
    appendfsync: str = "everysec",
    extra_args: tuple[str, ...] = (),
    bind: str = "127.0.0.1",
    wrapper: tuple[str, ...] = (),
) -> Iterator[RedisServer]:
    """Start redis-server on loopback with a temp dir; stop it afterwards.

    ``decode_responses``: the server's ``client()`` answers ``str`` instead of ``bytes``.
    ``appendfsync``: with ``appendonly``, ``always`` makes every answered write survive a
    SIGKILL of Redis (``restart``). ``bind``: the address it listens on; ``wrapper``: argv it
    runs under, which must exec it (``ip netns exec NS``: the pid stays Redis's).
    """
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.path.exists(binary):
        pytest.fail("redis-server is not installed: run scripts/setup-system")
    with tempfile.TemporaryDirectory(prefix="xmq-redis-") as data_dir:
        port = free_port()
        args = [
            *wrapper,
            binary,
            "--bind",
            bind,
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "yes" if appendonly else "no",
            "--appendfsync",
            appendfsync,
            "--dir",
            data_dir,
            *extra_args,
        ]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        server = RedisServer(proc, bind, port, decode_responses, args)
        try:
            wait_answering(server)
            yield server
        finally:
            proc = server.proc
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
