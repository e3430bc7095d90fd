"""A Redis master, one replica and three Sentinels on free loopback ports (real processes).

``redis_with_sentinels()`` yields a :class:`SentinelGroup` once the sentinels know the replica
and each other (so they can agree on a failover). ``url`` is the ``redis+sentinel://`` URL a
broker is given; ``kill_master`` SIGKILLs the current master, ``wait_failover`` waits until
the sentinels name another one, ``restart_killed`` starts the killed server again (the
sentinels turn it into a replica of the new master).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from tests.support.redis_server import RedisServer, free_port, wait_answering

MASTER_NAME = "xmqmaster"


class SentinelGroup:
    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir
        self.servers: dict[int, RedisServer] = {}  # by port
        self.sentinels: list[tuple[int, subprocess.Popen[bytes]]] = []
        self.killed: RedisServer | None = None

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port, _ in self.sentinels)
        return f"redis+sentinel://{hosts}/{MASTER_NAME}/0"

    def sentinel_client(self, index: int = 0) -> redis.Redis:
        return redis.Redis(port=self.sentinels[index][0], socket_timeout=5, decode_responses=True)

    def master_port(self) -> int:
        for index in range(len(self.sentinels)):
            client = self.sentinel_client(index)
            try:
                _, port = client.execute_command("SENTINEL", "get-master-addr-by-name", MASTER_NAME)  # type: ignore[no-untyped-call]
                return int(port)
            except redis.RedisError:
                continue
            finally:
                client.close()
        raise RuntimeError("no sentinel answers")

    def master(self) -> RedisServer:
        return self.servers[self.master_port()]

    def kill_master(self) -> int:
        """SIGKILL the current master; return its port."""
        server = self.master()
        server.proc.kill()
        server.proc.wait(10)
        self.killed = server
        return server.port

    def wait_failover(self, old_port: int, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            port = self.master_port()
            if port != old_port:
                role = self.servers[port].client().execute_command("ROLE")  # type: ignore[no-untyped-call]
                if role[0] in (b"master", "master"):
                    return port
            time.sleep(0.1)
        raise TimeoutError("no failover")

    def restart_killed(self) -> None:
        server = self.killed
        assert server is not None
        server.proc = subprocess.Popen(
            server.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_answering(server)
        self.killed = None

    def wait_replicas(self, count: int, timeout: float = 30.0) -> None:
        """Wait until the current master has ``count`` replicas online (synchronised)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            client = self.master().client()
            try:
                info = client.info("replication")
                online = [
                    value
                    for key, value in info.items()
                    if key.startswith("slave") and isinstance(value, dict)
                    if value.get("state") == "online"
                ]
                if len(online) >= count:
                    return
            except redis.RedisError:
                pass
            finally:
                client.close()
            time.sleep(0.1)
        raise TimeoutError(f"master has not {count} replicas")

    def stop(self) -> None:
        processes = [p for _, p in self.sentinels] + [s.proc for s in self.servers.values()]
        for proc in processes:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.terminate()
        for proc in processes:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _server(data_dir: Path, name: str, replica_of: int | None) -> RedisServer:
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    port = free_port()
    folder = data_dir / name
    folder.mkdir()
    args = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
    args += ["--appendonly", "yes", "--appendfsync", "everysec", "--dir", str(folder)]
    args += ["--repl-diskless-sync-delay", "0"]  # a replica syncs at once
    if replica_of is not None:
        args += ["--replicaof", "127.0.0.1", str(replica_of)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = RedisServer(proc, "127.0.0.1", port, args=args)
    wait_answering(server)
    return server


def _sentinel(data_dir: Path, index: int, master_port: int) -> tuple[int, subprocess.Popen[bytes]]:
    binary = shutil.which("redis-sentinel")
    if binary is None:
        pytest.fail("redis-sentinel is not installed: run scripts/setup-system")
    port = free_port()
    config = data_dir / f"sentinel-{index}.conf"
    config.write_text(
        f"port {port}\n"
        "bind 127.0.0.1\n"
        f"dir {data_dir}\n"
        f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n"
        f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
        f"sentinel failover-timeout {MASTER_NAME} 4000\n"
        f"sentinel parallel-syncs {MASTER_NAME} 1\n"
    )
    proc = subprocess.Popen(
        [binary, str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return port, proc


@contextmanager
def redis_with_sentinels() -> Iterator[SentinelGroup]:
    with tempfile.TemporaryDirectory(prefix="xmq-sentinel-") as folder:
        group = SentinelGroup(Path(folder))
        try:
            master = _server(group.dir, "master", None)
            group.servers[master.port] = master
            replica = _server(group.dir, "replica", master.port)
            group.servers[replica.port] = replica
            group.sentinels = [_sentinel(group.dir, i, master.port) for i in range(3)]
            group.wait_replicas(1)
            deadline = time.monotonic() + 30
            while True:  # every sentinel knows the replica and the two other sentinels
                ready = True
                for index in range(3):
                    client = group.sentinel_client(index)
                    try:
                        info = client.execute_command("SENTINEL", "master", MASTER_NAME)  # type: ignore[no-untyped-call]
                        fields = dict(info)  # redis-py answers a dict
                        ready = ready and int(fields["num-other-sentinels"]) >= 2
                        ready = ready and int(fields["num-slaves"]) >= 1
                    except redis.RedisError:
                        ready = False
                    finally:
                        client.close()
                if ready:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError("sentinels did not discover each other")
                time.sleep(0.2)
            yield group
        finally:
            group.stop()
