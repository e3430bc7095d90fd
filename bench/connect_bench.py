"""Micro-benchmark of a broker node's connection set-up (no sockets): the reconnect storm.

Drives ``MqttClientProtocol`` (the real network adapter: reader, flush scheduler, core) over a
stand-in transport through accept -> CONNECT -> CONNACK -> SUBSCRIBE -> SUBACK -> DISCONNECT
-> connection lost, ``--batch`` clients at a time (every CONNECT of a batch arrives in the same
loop tick, as in a storm after a node failure). Single node, no cluster. Prints CPU
microseconds per client (``time.process_time`` over the whole cycle, loop ticks included).

    .venv/bin/python bench/connect_bench.py [--clients 20000] [--batch 500] [--version 5]
        [--persistent | --resume] [--uvloop] [--repeat 5] [--profile]

``--connect-only``: accept -> CONNECT -> CONNACK only, one client per loop turn (as connects
arriving apart), every client held. With ``--instructions`` it runs itself twice under
callgrind (N and N/2 clients, on uvloop) and prints the instructions per connect, start-up
cancelled: a count that does not move with the machine's load (docs/benchmarks.md, "Connect
cost").

    .venv/bin/python bench/connect_bench.py --connect-only --instructions [--clients 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from uvloop import run as uvloop_run

from xmq.bench.tracers import count_instructions, per_unit
from xmq.codec.packets import Connect, Disconnect, Subscribe, SubscriptionRequest
from xmq.codec.properties import Properties
from xmq.codec.writer import encode
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.connection_states import CONNECTED
from xmq.core.settings import CoreSettings
from xmq.net.client_protocol import FlushScheduler, MqttClientProtocol


class SinkTransport:
    """Stands in for the socket transport: counts the bytes the broker writes."""

    __slots__ = ("closing", "written")

    def __init__(self) -> None:
        self.written = 0
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("10.0.0.1", 40000) if name == "peername" else default

    def write(self, data: bytes | bytearray) -> None:
        self.written += len(data)

    def is_closing(self) -> bool:
        return self.closing

    def can_write_eof(self) -> bool:
        return False  # close at once: no linger timer in the benchmark

    def write_eof(self) -> None:
        pass

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _wire(client_id: str, version: int, persistent: bool) -> tuple[bytes, bytes, bytes]:
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
    subscribe = Subscribe(1, [SubscriptionRequest(f"devices/{client_id}/cmd", 1)])
    return encode(connect, version), encode(subscribe, version), encode(Disconnect(0), version)


async def _ticks(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def run(
    clients: int,
    batch: int,
    version: int,
    persistent: bool,
    profiler: cProfile.Profile | None,
    resume: bool = False,
) -> float:
    """Connect/subscribe/disconnect ``clients`` clients; return CPU seconds used.

    ``resume``: every client connects twice (persistent sessions); only the second time, when
    its session is present, is measured.
    """
    broker = Broker(CoreSettings())
    scheduler = FlushScheduler(asyncio.get_running_loop())
    wires = [_wire(f"dev-{n:06d}", version, persistent) for n in range(clients)]
    if resume:
        await _cycle(broker, scheduler, wires, batch, persistent, None)
    return await _cycle(broker, scheduler, wires, batch, persistent, profiler)


async def _cycle(
    broker: Broker,
    scheduler: FlushScheduler,
    wires: list[tuple[bytes, bytes, bytes]],
    batch: int,
    persistent: bool,
    profiler: cProfile.Profile | None,
) -> float:
    authenticator = AnonymousAuthenticator()
    authorizer = AllowAll()
    clients = len(wires)
    cpu = 0.0
    for first in range(0, clients, batch):
        chunk = wires[first : first + batch]
        if profiler is not None:
            profiler.enable()
        start = time.process_time()
        links = []
        for connect, _sub, _disc in chunk:
            link = MqttClientProtocol(broker, authenticator, authorizer, scheduler, 1 << 20)
            transport = SinkTransport()
            link.connection_made(transport)  # type: ignore[arg-type]
            link.data_received(connect)
            links.append((link, transport))
        await _ticks(4)  # the authenticator tasks, CONNACKs, the flush
        for (link, _transport), (_connect, sub, _disc) in zip(links, chunk, strict=True):
            link.data_received(sub)
        await _ticks(1)
        for (link, _transport), (_connect, _sub, disc) in zip(links, chunk, strict=True):
            link.data_received(disc)
            link.connection_lost(None)
        await _ticks(1)
        cpu += time.process_time() - start
        if profiler is not None:
            profiler.disable()
        for link, transport in links:
            assert link.conn.state != CONNECTED and transport.written > 0, "client not served"
    assert broker.stats.clients_connected == 0
    expected = clients if persistent else 0
    assert len(broker.sessions) == expected, (len(broker.sessions), expected)
    return cpu


async def connect_only(clients: int, version: int) -> float:
    """Connect ``clients`` clients one per loop turn and hold them; return CPU seconds used."""
    broker = Broker(CoreSettings())
    scheduler = FlushScheduler(asyncio.get_running_loop())
    authenticator = AnonymousAuthenticator()
    authorizer = AllowAll()
    template = _wire("dev-000000", version, False)[0]  # ids of one length: patch the digits
    wires = [template[:-6] + b"%06d" % n for n in range(clients)]
    held = []
    gc.disable()  # what a collection costs depends on the whole heap, not on the connect path
    start = time.process_time()
    for connect in wires:
        link = MqttClientProtocol(broker, authenticator, authorizer, scheduler, 1 << 20)
        transport = SinkTransport()
        link.connection_made(transport)  # type: ignore[arg-type]
        link.data_received(connect)
        held.append((link, transport))
        await asyncio.sleep(0)  # the CONNACK's flush, and the next connect in its own turn
    cpu = time.process_time() - start
    for link, transport in held:
        assert link.conn.state == CONNECTED and transport.written > 0, "client not served"
    assert broker.stats.clients_connected == clients
    return cpu


def _instructions(clients: int, version: int) -> float:
    """Instructions per connect: this script run under callgrind with N and N/2 clients."""
    counts = []
    with tempfile.TemporaryDirectory(prefix="xmq-connect-instr-") as tmp:
        for n in (clients, clients // 2):
            argv = [sys.executable, __file__, "--connect-only", "--uvloop", "--repeat", "1"]
            argv += ["--clients", str(n), "--version", str(version)]
            counts.append(count_instructions(argv, Path(tmp) / f"callgrind.{n}.out"))
    return per_unit(counts[0], counts[1], clients, clients // 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--version", type=int, default=5, choices=(4, 5))
    parser.add_argument("--persistent", action="store_true", help="session expiry 3600 s")
    parser.add_argument(
        "--resume", action="store_true", help="persistent, measured on reconnect (present)"
    )
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop (as xmq serve)")
    parser.add_argument("--repeat", type=int, default=5, help="runs; the best and median shown")
    parser.add_argument("--profile", action="store_true", help="cProfile, top 30 by tottime")
    parser.add_argument(
        "--connect-only", action="store_true", help="CONNECT/CONNACK only, one per loop turn"
    )
    parser.add_argument(
        "--instructions", action="store_true", help="with --connect-only: count under callgrind"
    )
    args = parser.parse_args()
    if args.connect_only:
        if args.instructions:
            per_connect = _instructions(args.clients, args.version)
            print(f"connect v{args.version}: {per_connect:,.0f} instructions per connect")
            return
        runner_only: Any = uvloop_run if args.uvloop else asyncio.run
        cpu = min(runner_only(connect_only(args.clients, args.version)) for _ in range(args.repeat))
        print(f"connect v{args.version}: {cpu / args.clients * 1e6:,.1f} us CPU per connect")
        sys.stdout.flush()
        os._exit(0)  # no teardown: freeing the held clients is no part of a connect's cost
    runner: Any = uvloop_run if args.uvloop else asyncio.run
    profiler = cProfile.Profile() if args.profile else None
    runs = sorted(
        runner(
            run(
                args.clients,
                args.batch,
                args.version,
                args.persistent or args.resume,
                profiler,
                args.resume,
            )
        )
        / args.clients
        for _ in range(max(1, args.repeat))
    )
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
    kind = "resumed" if args.resume else "persistent" if args.persistent else "clean"
    print(
        f"connect cycle v{args.version} {kind}: {args.clients} clients in batches of "
        f"{args.batch}: {runs[0] * 1e6:,.1f} us CPU per client "
        f"(median {runs[len(runs) // 2] * 1e6:,.1f} of {len(runs)} runs)"
    )


if __name__ == "__main__":
    main()
