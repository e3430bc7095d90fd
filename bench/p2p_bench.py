"""Micro-benchmark of one point-to-point message through the broker's Python path (no sockets).

Real ``MqttClientProtocol`` objects (net layer, per-tick flush) on fake transports: a
publisher's PUBLISH bytes go into ``data_received``, the loop turns once (the flush writes the
PUBACK to the publisher and the PUBLISH to the subscriber), then the subscriber's PUBACK bytes
go into ``data_received``. Every pair has its own topic, as in ``xmq bench p2p``. Prints CPU
microseconds per message: what the broker spends in Python and uvloop's callbacks per message,
without the system calls.

    .venv/bin/python bench/p2p_bench.py [--pairs 2000] [--messages 100000] [--batch 10]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import time
from pathlib import Path

if not __package__:  # run as a file (python bench/p2p_bench.py): the modules beside it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop  # noqa: E402

from bench.fake_transports import V5, connect_client  # noqa: E402
from xmq.codec.packets import Puback, Publish, Subscribe, SubscriptionRequest  # noqa: E402
from xmq.codec.writer import encode  # noqa: E402
from xmq.core.broker import Broker  # noqa: E402
from xmq.core.settings import CoreSettings  # noqa: E402
from xmq.net.client_protocol import FlushScheduler  # noqa: E402


async def run(pairs: int, messages: int, batch: int, profile: bool) -> None:
    loop = asyncio.get_running_loop()
    broker = Broker(CoreSettings())
    scheduler = FlushScheduler(loop)
    publishers = []
    subscribers = []
    for n in range(pairs):
        sub, sub_t = await connect_client(broker, scheduler, f"s{n}")
        sub.data_received(encode(Subscribe(1, [SubscriptionRequest(f"p2p/{n}", 1)]), V5))
        pub, _ = await connect_client(broker, scheduler, f"p{n}")
        publishers.append((pub, n))
        subscribers.append((sub, sub_t))
    await asyncio.sleep(0)
    payload = b"0123456789abcdef"
    frames = [
        [encode(Publish(f"p2p/{n}", payload, qos=1, packet_id=pid), V5) for pid in (1, 2)]
        for n in range(pairs)
    ]
    pubacks = [encode(Puback(packet_id), V5) for packet_id in range(0x10000)]
    profiler = cProfile.Profile() if profile else None
    sent = 0
    cpu = 0.0
    index = 0
    while sent < messages:
        start = time.process_time()
        if profiler:
            profiler.enable()
        chosen = []
        for _ in range(batch):
            pub, n = publishers[index % pairs]
            pub.data_received(frames[n][(index // pairs) & 1])
            chosen.append(n)
            index += 1
        await asyncio.sleep(0)  # the tick's flush
        for n in chosen:
            sub, sub_t = subscribers[n]
            packet_id = int.from_bytes(sub_t.last[-18:-16], "big")
            sub.data_received(pubacks[packet_id])
        if profiler:
            profiler.disable()
        cpu += time.process_time() - start
        sent += batch
    per_message = cpu / sent * 1e6
    print(f"p2p: {pairs} pairs, {sent} messages, {batch} per tick: {per_message:.2f} us CPU/msg")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10, help="messages per loop tick")
    parser.add_argument("--profile", action="store_true", help="print a cProfile table")
    args = parser.parse_args()
    uvloop.run(run(args.pairs, args.messages, args.batch, args.profile))


if __name__ == "__main__":
    main()
