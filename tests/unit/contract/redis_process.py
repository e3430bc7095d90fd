"""A throw-away redis-server on a free loopback port, for tests that need a real Redis."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import redis


@dataclass(frozen=True)
class RedisServer:
    """A running redis-server."""

    host: str
    port: int

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port, decode_responses=True)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def running_redis() -> Iterator[RedisServer]:
    """Start redis-server (Debian package) on loopback with a temp dir; stop it afterwards."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not shutil.which(binary):
        pytest.fail("redis-server is not installed: run scripts/setup-system")
    with tempfile.TemporaryDirectory(prefix="xmq-redis-") as data_dir:
        port = _free_port()
        args = [
            binary,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            data_dir,
        ]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        server = RedisServer("127.0.0.1", port)
        try:
            deadline = time.monotonic() + 10
            client = server.client()
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            client.close()
            yield server
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
