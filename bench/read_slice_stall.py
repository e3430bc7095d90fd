"""The longest event-loop turn while one client's flood of tiny packets is read and handled.

    .venv/bin/python bench/read_slice_stall.py [--kind pingreq|qos0|qos1 ...]
        [--bytes 1048576] [--runs 3]

Runs a broker in process (uvloop, in memory, the garbage collector tuned, as ``xmq serve``
does: one listener of ``MqttClientProtocol``). In a subprocess (no GIL shared with the loop)
one client connects and sends ``--bytes`` of one kind of packet as fast as the socket takes
them (PINGREQ; QoS 0 PUBLISH to ``t``, empty payload, no subscriber; QoS 1 likewise, each
answered by a PUBACK), while a second client pings the broker every millisecond. The loop
runs a ``call_soon`` chain: the time between two of its runs is one loop turn, so the longest
gap is the longest turn (reads, decoding and handling included), to the microsecond rather
than the 10 ms lag sampler's resolution, in wall-clock time and in the loop thread's CPU time
(``time.thread_time``: a turn the host's scheduler stretched is not counted as work).
Reported per run: the longest turn, the turns over 5 ms of CPU, the time until every answer
arrived, and the well-behaved client's longest ping. uvloop reads at most 256 KiB at a time;
the first reads of a new connection are smaller (TCP's receive window grows as it goes), so
the default 1 MiB makes sure that reads of the full 256 KiB are among them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "broker"))

import uvloop  # noqa: E402

from xmq.app.server import tune_garbage_collector  # noqa: E402
from xmq.codec.packets import MQTT_5, Connect, Pingreq, Publish  # noqa: E402
from xmq.codec.writer import encode  # noqa: E402
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator  # noqa: E402
from xmq.core.broker import Broker  # noqa: E402
from xmq.core.settings import CoreSettings  # noqa: E402
from xmq.native_build import BUILD  # noqa: E402
from xmq.net.client_protocol import FlushScheduler, MqttClientProtocol  # noqa: E402

KINDS = ("pingreq", "qos0", "qos1")


def _packet(kind: str, n: int) -> bytes:
    if kind == "pingreq":
        return encode(Pingreq(), MQTT_5)
    if kind == "qos0":
        return encode(Publish(topic="t", payload=b"", qos=0), MQTT_5)
    return encode(Publish(topic="t", payload=b"", qos=1, packet_id=n % 65535 + 1), MQTT_5)


def _flood(kind: str, size: int) -> tuple[bytes, int]:
    """About ``size`` bytes of packets of one kind, and how many answer bytes they get."""
    packets: list[bytes] = []
    total = 0
    while total + len(_packet(kind, len(packets))) <= size:
        packets.append(_packet(kind, len(packets)))
        total += len(packets[-1])
    answer = {"pingreq": 2, "qos0": 0, "qos1": 4}[kind]  # PINGRESP, -, PUBACK (v5 short form)
    return b"".join(packets), answer * len(packets)


def _connect(port: int, client_id: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)  # the write in one go
    sock.connect(("127.0.0.1", port))
    sock.sendall(encode(Connect(client_id=client_id), MQTT_5))
    assert sock.recv(64)[0] == 0x20  # CONNACK
    return sock


def client(port: int, kind: str, size: int) -> None:
    """The subprocess: the flood, the well-behaved pinger; prints its figures."""
    flood, answers = _flood(kind, size)
    attacker = _connect(port, "flood")
    pinger = _connect(port, "well-behaved")
    if kind == "qos0":  # no answer: a PINGREQ after the flood says it was all handled
        flood += encode(Pingreq(), MQTT_5)
        answers = 2
    attacker.setblocking(False)
    started = time.monotonic()
    sent = 0
    got = 0
    pings: list[float] = []
    while got < answers or sent < len(flood):
        if sent < len(flood):
            with contextlib.suppress(BlockingIOError):
                sent += attacker.send(flood[sent:])
        try:
            while True:
                chunk = attacker.recv(1 << 20)
                if not chunk:
                    raise SystemExit("the broker closed the flood's connection")
                got += len(chunk)
        except BlockingIOError:
            pass
        asked = time.monotonic()
        pinger.sendall(encode(Pingreq(), MQTT_5))
        assert pinger.recv(16) == b"\xd0\x00"
        pings.append(time.monotonic() - asked)
        time.sleep(0.001)
    done = time.monotonic() - started
    print(f"{len(flood)} {done:.6f} {max(pings):.6f} {len(pings)}", flush=True)


async def _run(kind: str, size: int) -> tuple[float, float, int, float, float, int]:
    loop = asyncio.get_running_loop()
    broker = Broker(CoreSettings())
    scheduler = FlushScheduler(loop)
    authenticator = AnonymousAuthenticator()
    server = await loop.create_server(
        lambda: cast(  # duck-typed: an asyncio protocol by its methods
            asyncio.Protocol,
            MqttClientProtocol(broker, authenticator, AllowAll(), scheduler, 1 << 20),
        ),
        "127.0.0.1",
        0,
    )
    port = server.sockets[0].getsockname()[1]
    turns: list[float] = []
    cpu_turns: list[float] = []
    last = time.perf_counter()
    last_cpu = time.thread_time()
    running = True

    def probe() -> None:
        nonlocal last, last_cpu
        now = time.perf_counter()
        cpu = time.thread_time()
        turns.append(now - last)
        cpu_turns.append(cpu - last_cpu)
        last = now
        last_cpu = cpu
        if running:
            loop.call_soon(probe)

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--client",
        str(port),
        kind,
        str(size),
        stdout=subprocess.PIPE,
    )
    last = time.perf_counter()  # from here: the fork of the client is not a turn measured
    last_cpu = time.thread_time()
    loop.call_soon(probe)
    out, _ = await proc.communicate()
    running = False
    server.close()
    written, done, ping, _ = out.decode().split()
    slow = sum(1 for t in cpu_turns if t > 0.005)
    return max(turns), max(cpu_turns), slow, float(done), float(ping), int(written)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--client", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--kind", action="append", choices=KINDS)
    parser.add_argument("--bytes", type=int, default=1 << 20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.client:
        port, kind, size = args.client
        client(int(port), kind, int(size))
        return
    tune_garbage_collector()  # as ``xmq serve`` does
    print(f"build: {BUILD}")
    print(
        "| packets of one write | bytes | longest turn, wall (ms) | longest turn, CPU (ms) |"
        " turns > 5 ms CPU | all answered (ms) | well-behaved ping max (ms) |"
    )
    print("|---|---|---|---|---|---|---|")
    for kind in args.kind or list(KINDS):
        for _ in range(args.runs):
            worst, worst_cpu, slow, done, ping, written = uvloop.run(_run(kind, args.bytes))
            print(
                f"| {kind} | {written:,} | {worst * 1e3:.1f} | {worst_cpu * 1e3:.1f} | {slow} |"
                f" {done * 1e3:.0f} | {ping * 1e3:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
