"""The faults ``xmq bench survivability --fault`` injects into a running cluster.

``kill`` SIGKILLs the victim node (and starts it again with ``--restart-cmd``); ``stop``
SIGSTOPs it for ``--fault-for`` seconds; ``drain`` asks it to drain (``POST /admin/drain`` on
``--victim-http``), then each ``--also-drain`` node ``--fault-for`` seconds after the
previous; ``redis-stop`` SIGSTOPs Redis (``--redis-url``) for ``--fault-for`` seconds;
``redis-restart`` SIGKILLs Redis and starts it again with the same command line and working
directory (it reloads its AOF / RDB); ``link-reset`` resets every TCP connection
between the victim and the other broker processes (``ss -K``, as root); ``takeover`` connects
each of a tenth of the subscribers to two other nodes at the same instant (one client id, two
CONNECTs) and counts the client ids left with two live connections; ``partition`` runs
``--cut-cmd``, and ``--heal-cmd`` ``--fault-for`` seconds later (the network is the user's:
e.g. ``nft`` rules on the bridge of network namespaces, a NetworkPolicy).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import psutil
import redis

from xmq.bench.migration import pid_listening_on

if TYPE_CHECKING:
    from xmq.bench.survivability import Run
    from xmq.bench.survivability_client import Client

FAULTS = (
    "kill",
    "drain",
    "stop",
    "redis-stop",
    "redis-restart",
    "link-reset",
    "takeover",
    "partition",
)


@dataclass(frozen=True, slots=True)
class FaultOptions:
    kind: str = "kill"
    duration_s: float = 5.0
    """How long ``stop`` / ``redis-stop`` last."""
    victim_http: str = ""
    """``host:port`` of the victim's HTTP endpoint (``drain``)."""
    also_drain: tuple[str, ...] = ()
    """``drain``: HTTP endpoints of more nodes drained after the victim, one every
    ``duration_s`` (a roll: node after node)."""
    cut_cmd: tuple[str, ...] = ()
    """``partition``: the command that cuts the network (e.g. an ``nft`` drop rule)."""
    heal_cmd: tuple[str, ...] = ()
    """``partition``: the command that heals it, ``duration_s`` later."""


def redis_pid(redis_url: str | None) -> int:
    if not redis_url:
        raise RuntimeError("this fault needs --redis-url")
    port = urlparse(redis_url).port or 6379
    pid = pid_listening_on(port)
    if pid is None:
        raise RuntimeError(f"no process listens on the Redis port {port}")
    return pid


def pause(pid: int, seconds: float) -> None:
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


_RESTART_SETTINGS = (
    "port",
    "bind",
    "dir",
    "appendonly",
    "appendfsync",
    "appenddirname",
    "appendfilename",
    "dbfilename",
    "save",
    "requirepass",
)
"""What a restarted Redis keeps of its running configuration (Redis rewrites its process
title, so its command line cannot be read back)."""


def restart_redis(pid: int, redis_url: str) -> int:
    """SIGKILL Redis and start it again with the same binary, port, data dir and persistence
    settings (it reloads its AOF / RDB); return the new pid."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5, decode_responses=True)
    try:
        config: dict[str, str] = {
            str(key): str(value) for key, value in client.config_get("*").items()
        }
    finally:
        client.close()
    process = psutil.Process(pid)
    # argv[0] ("redis-server", as in its rewritten title): the binary acts on its name
    # (Debian's redis-server is a link to redis-check-rdb)
    name = process.cmdline()[0].split()[0]
    command = [shutil.which(name) or name]
    for name in _RESTART_SETTINGS:
        if name in config:
            command += [f"--{name}", *(config[name].split() if name == "bind" else [config[name]])]
    cwd = process.cwd()
    process.kill()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # gone, or a zombie of whoever started it
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.02)
    started = subprocess.Popen(
        command,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return started.pid


def partition(cut: tuple[str, ...], heal: tuple[str, ...], seconds: float) -> None:
    """Run ``cut``, wait, run ``heal`` (also when the wait is interrupted)."""
    if not cut or not heal:
        raise RuntimeError("--fault partition needs --cut-cmd and --heal-cmd")
    subprocess.run(cut, check=True, capture_output=True)
    try:
        time.sleep(seconds)
    finally:
        subprocess.run(heal, check=True, capture_output=True)


def drain(victim_http: str) -> str:
    if not victim_http:
        raise RuntimeError("--fault drain needs --victim-http HOST:PORT")
    request = urllib.request.Request(f"http://{victim_http}/admin/drain", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - our node
        return str(response.read().decode(errors="replace")).strip()


def reset_links(victim: int, brokers: tuple[int, ...]) -> int:
    """``ss -K`` every established TCP connection between ``victim`` and another broker."""
    others = {p for p in brokers if p != victim}
    local: dict[tuple[str, int], int] = {}
    for conn in psutil.net_connections(kind="tcp"):
        if conn.pid in others and conn.laddr:
            local[(conn.laddr.ip, conn.laddr.port)] = conn.pid
    reset = 0
    for conn in psutil.net_connections(kind="tcp"):
        if conn.pid != victim or conn.status != psutil.CONN_ESTABLISHED or not conn.raddr:
            continue
        if (conn.raddr.ip, conn.raddr.port) not in local or not conn.laddr:
            continue
        here, there = conn.laddr, conn.raddr
        subprocess.run(
            ["ss", "-K", "src", here.ip, "sport", "=", f":{here.port}"]
            + ["dst", there.ip, "dport", "=", f":{there.port}"],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        reset += 1
    return reset


async def takeover(run: Run, client: Client) -> bool:
    """Connect ``client``'s id to the two nodes after its own at the same instant; True when
    both stay live (the cluster let one client id have two connections)."""
    nodes = len(run.options.nodes)
    if client.watch is not None:
        client.watch.cancel()
    first, second = (client.node + 1) % nodes, (client.node + 2) % nodes
    results = await asyncio.gather(client.open(first), client.open(second), return_exceptions=True)
    live = [r for r in results if not isinstance(r, BaseException)]
    await asyncio.sleep(1.0)
    alive = [c for c in live if c.transport is not None and not c.transport.is_closing()]
    both = len(alive) > 1
    for extra in alive[1:]:
        extra.disconnect()
    if alive:
        client.connection = alive[0]
    client.watch = asyncio.get_running_loop().create_task(client.keep_alive())
    return both
