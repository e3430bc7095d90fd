"""Bytes per parked persistent session: in process (tracemalloc) or of a real node (RSS).

    .venv/bin/python bench/parked_session_cost.py [--sessions 20000] [--top 12] [--will-delay S]
    .venv/bin/python bench/parked_session_cost.py --node memory|cluster [--sessions 20000]

Connects ``--sessions`` clients (MQTT 5, Session Expiry Interval 3600 s, one QoS 1
subscription each) to an in-process broker over an in-memory link, closes their connections
(the sessions stay parked, with their expiry pending) and reports what the parked sessions
hold per session: everything the broker kept (tracemalloc, the Python allocator and
``PyMem_RawMalloc`` — uvloop's timer handles included) and the largest allocation sites.
Runs under uvloop, as ``xmq serve`` does. With ``--will-delay S``: each client has a will with
a Will Delay Interval of S seconds and its connection is lost (not DISCONNECTed), so each
parked session also holds its delayed will, pending.

With ``--node``: starts ``xmq serve`` (``memory``: one node; ``cluster``: a node of a cluster
on a throw-away ``redis-server``, whose persistent sessions are durable), parks ``--sessions``
sessions over real sockets (``abuse_bench.park_sessions``: CONNECT with expiry 3600 s,
SUBSCRIBE, DISCONNECT; 100 at a time), and reports the node's RSS growth per session, after a
warm-up of 2,000 sessions. The broker runs the code ``python -m xmq`` finds (``PYTHONPATH``
picks another tree for a before/after).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import sys
import tempfile
import tracemalloc
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "broker"))

import uvloop  # noqa: E402

from xmq.codec.packets import (  # noqa: E402
    MQTT_5,
    Connect,
    Subscribe,
    SubscriptionRequest,
    Will,
)
from xmq.codec.properties import Properties  # noqa: E402
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator  # noqa: E402
from xmq.core.broker import Broker  # noqa: E402
from xmq.core.client_link import ClientLink  # noqa: E402
from xmq.core.connection import ClientConnection  # noqa: E402
from xmq.core.settings import CoreSettings  # noqa: E402


class _Link(ClientLink):
    __slots__ = ("closed", "peer")  # (``congested`` is the compiled base's field)

    peer: str

    def __init__(self) -> None:
        self.peer = "127.0.0.1:1"
        self.congested = False
        self.closed = False

    def write(self, data: bytes) -> None:
        pass

    def write_publish(self, head: bytes, packet_id: int, tail: bytes) -> None:
        pass

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def login_accepted(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _park(broker: Broker, count: int, prefix: str = "device", will_delay: int = 0) -> None:
    for n in range(count):
        props = Properties()
        props.session_expiry_interval = 3600
        conn = ClientConnection(broker, _Link(), AnonymousAuthenticator(), AllowAll())
        will = None
        if will_delay:
            will_props = Properties()
            will_props.will_delay_interval = will_delay
            will = Will(f"{prefix}s/{n:06d}/gone", b"gone", 1, False, will_props)
        client_id = f"{prefix}-{n:06d}"
        conn.handle(
            Connect(client_id=client_id, protocol_version=MQTT_5, properties=props, will=will)
        )
        for _ in range(3):
            await asyncio.sleep(0)
        conn.handle(
            Subscribe(packet_id=1, subscriptions=[SubscriptionRequest(f"{prefix}s/{n:06d}/#", 1)])
        )
        conn.connection_lost()
    for _ in range(3):
        await asyncio.sleep(0)


async def _main(count: int, top: int, will_delay: int) -> None:
    broker = Broker(CoreSettings())
    # warm-up: lazily built module state is not a session's cost
    await _park(broker, 50, "warm", will_delay)
    gc.collect()
    tracemalloc.start(8)
    before = tracemalloc.take_snapshot()
    used_before = tracemalloc.get_traced_memory()[0]
    await _park(broker, count, will_delay=will_delay)
    gc.collect()
    used_after = tracemalloc.get_traced_memory()[0]
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    parked = sum(1 for s in broker.sessions.values() if s.connection is None)
    print(f"parked persistent sessions: {parked} (expected {count + 50})")
    if will_delay:
        pending = sum(1 for s in broker.sessions.values() if s.will is not None)
        print(f"delayed wills pending: {pending}")
    print(f"bytes per parked session: {(used_after - used_before) / count:.0f}")
    for stat in after.compare_to(before, "traceback")[:top]:
        where = " < ".join(
            f"{frame.filename.split('/')[-1]}:{frame.lineno}"
            for frame in list(stat.traceback)[::-1][:3]
        )
        print(f"  {stat.size_diff / count:7.1f} B  {where}")


def _sibling(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


async def _node(kind: str, count: int) -> None:
    abuse_bench = _sibling("abuse_bench")  # a script, not a package: loaded by path

    with tempfile.TemporaryDirectory(prefix="xmq-parked-") as data_dir:
        config = "listeners:\n  - {name: mqtt, protocol: tcp, host: 127.0.0.1, port: 0}\n"
        redis = None
        if kind == "cluster":
            redis, url = abuse_bench.start_redis(data_dir)
            config += abuse_bench.cluster_config(url)
        broker = abuse_bench.Broker(config, "node-1" if redis is not None else None)
        try:
            await abuse_bench.park_sessions(broker.port, "warm-", "parked/#", 2000)
            await asyncio.sleep(2)
            before = broker.rss()
            codes = await abuse_bench.park_sessions(broker.port, "parked-", "parked/#", count)
            await asyncio.sleep(2)
            after = broker.rss()
        finally:
            broker.stop()
            if redis is not None:
                redis.terminate()
                redis.wait()
    print(f"{kind} node: {codes.get(0, 0)} of {count} parked (CONNACK 0x00)")
    per_session = (after - before) / count
    print(f"RSS {before / 2**20:.1f} -> {after / 2**20:.1f} MiB: {per_session:.0f} B/session")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=20_000)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--node", choices=("memory", "cluster"))
    parser.add_argument("--will-delay", type=int, default=0, help="in process only")
    args = parser.parse_args()
    if args.node:
        asyncio.run(_node(args.node, args.sessions))
    else:
        uvloop.run(_main(args.sessions, args.top, args.will_delay))


if __name__ == "__main__":
    main()
