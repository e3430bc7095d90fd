"""Connection set-up over real sockets: the broker process's CPU per client connection.

Starts ``xmq serve`` (one node, in memory, ``$SYS`` off) as a subprocess — the ``xmq`` found on
``PYTHONPATH``, so a copy of another revision can be compared — and connects ``--clients``
clients, ``--concurrency`` at a time: TCP connect, CONNECT, CONNACK, SUBSCRIBE, SUBACK,
DISCONNECT, close. Prints the broker's CPU (user + system, from /proc) per client.

    .venv/bin/python bench/connect_socket_bench.py [--clients 5000] [--concurrency 200]
        [--version 5] [--persistent] [--profile PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import time

from xmq.codec.packets import Connect, Disconnect, Subscribe, SubscriptionRequest
from xmq.codec.properties import Properties
from xmq.codec.writer import encode

_LISTENING = re.compile(r"^xmq: listening \S+ \S+ \S+:(\d+)$")
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process ``pid``."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / _TICK, int(fields[12]) / _TICK


def _packets(client_id: str, version: int, persistent: bool) -> tuple[bytes, bytes, bytes]:
    props = None
    if version == 5:
        props = Properties()
        if persistent:
            props.session_expiry_interval = 3600
    connect = Connect(
        client_id=client_id,
        protocol_version=version,
        clean_start=not persistent,
        keep_alive=60,
        properties=props,
    )
    sub = Subscribe(1, [SubscriptionRequest(f"devices/{client_id}/cmd", 1)])
    return encode(connect, version), encode(sub, version), encode(Disconnect(0), version)


async def _read_packet(reader: asyncio.StreamReader) -> int:
    head = await reader.readexactly(2)
    if head[1]:
        await reader.readexactly(head[1])  # the replies here are all shorter than 128 bytes
    return head[0]


async def _client(port: int, packets: tuple[bytes, bytes, bytes]) -> None:
    connect, sub, disconnect = packets
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(connect)
    if await _read_packet(reader) != 0x20:
        raise RuntimeError("no CONNACK")
    writer.write(sub)
    if await _read_packet(reader) != 0x90:
        raise RuntimeError("no SUBACK")
    writer.write(disconnect)
    writer.close()
    await writer.wait_closed()


async def _storm(port: int, clients: int, concurrency: int, version: int, persistent: bool) -> None:
    packets = [_packets(f"dev-{n:06d}", version, persistent) for n in range(clients)]
    for first in range(0, clients, concurrency):
        chunk = packets[first : first + concurrency]
        await asyncio.gather(*(_client(port, p) for p in chunk))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--version", type=int, default=5, choices=(4, 5))
    parser.add_argument("--persistent", action="store_true", help="session expiry 3600 s")
    parser.add_argument("--profile", metavar="PATH", help="run the broker under cProfile")
    args = parser.parse_args()
    env = dict(os.environ, XMQ_SYS__INTERVAL_S="0", XMQ_METRICS__PORT="0")
    cmd = [sys.executable, "-m", "xmq", "serve", "--host", "127.0.0.1", "--port", "0"]
    if args.profile:
        cmd[1:1] = ["-m", "cProfile", "-o", args.profile]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        assert proc.stdout is not None
        port = 0
        while not port:
            line = proc.stdout.readline().decode()
            if not line:
                raise RuntimeError("the broker did not start")
            match = _LISTENING.match(line.strip())
            port = int(match.group(1)) if match else 0
        time.sleep(0.5)
        # warm up, then measure
        asyncio.run(_storm(port, 500, args.concurrency, args.version, args.persistent))
        before = _cpu_s(proc.pid)
        started = time.monotonic()
        asyncio.run(_storm(port, args.clients, args.concurrency, args.version, args.persistent))
        elapsed = time.monotonic() - started
        time.sleep(0.2)
        after = _cpu_s(proc.pid)
        user, system = after[0] - before[0], after[1] - before[1]
    finally:
        proc.terminate()
        proc.wait(10)
    kind = "persistent" if args.persistent else "clean"
    print(
        f"socket connect cycle v{args.version} {kind}: {args.clients} clients, "
        f"{args.concurrency} at a time, {args.clients / elapsed:,.0f}/s: "
        f"broker {(user + system) / args.clients * 1e6:,.0f} us CPU per client "
        f"(user {user / args.clients * 1e6:,.0f}, system {system / args.clients * 1e6:,.0f})"
    )


if __name__ == "__main__":
    main()
