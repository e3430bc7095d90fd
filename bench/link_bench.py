"""Micro-benchmark of one point-to-point message crossing a node link (no sockets).

Two brokers on one event loop, each with its ``ClusterHub``, joined by two ``PeerLink``
objects whose transports hand their bytes to the bench (stands in for the TCP link). Real
``MqttClientProtocol`` clients on fake transports: publishers on node A, subscribers on node B,
one topic per pair, QoS 1, clean sessions, ``max_queued_writes`` 0 (held acks on, as a cluster
runs by default). One cycle:

1. A: the publishers' PUBLISH bytes go into ``data_received`` (``route_publish`` ->
   ``Broker.publish`` -> ``ClusterHub.forward`` -> a PUBLISH frame in the link's buffer);
2. the loop turns until A's link has written and the frames are fed to B's link
   (``link_dispatch.handle_frame`` -> decode -> ``Broker.publish_from_peer`` ->
   ``Session.deliver`` -> the subscriber's write buffer) and until every subscriber of the
   cycle has been written to (B sends no PUBLISH_ACK for a frame nothing durable keeps);
3. the subscribers' PUBACKs go into B.

Prints CPU microseconds per message (``time.process_time``: Python and uvloop callbacks, no
system calls) and loop turns per cycle.

    .venv/bin/python bench/link_bench.py [--pairs 2000] [--messages 100000] [--batch 10]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import time
from pathlib import Path
from typing import cast

if not __package__:  # run as a file (python bench/link_bench.py): the modules beside it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop  # noqa: E402

import xmq  # noqa: E402
from bench.fake_transports import V5, LinkTransport, connect_client  # noqa: E402
from xmq.cluster.cluster_hub import ClusterHub  # noqa: E402
from xmq.cluster.peer_link import PeerLink  # noqa: E402
from xmq.codec.packets import Puback, Publish, Subscribe, SubscriptionRequest  # noqa: E402
from xmq.codec.writer import encode  # noqa: E402
from xmq.core.broker import Broker  # noqa: E402
from xmq.core.cluster_ports import DurableStore, NodeIdentity  # noqa: E402
from xmq.core.held_acks import AckGate  # noqa: E402
from xmq.core.settings import CoreSettings  # noqa: E402
from xmq.net.client_protocol import FlushScheduler  # noqa: E402


class IdleStore:
    """A durable store with nothing to write (clean sessions): always ``written``."""

    ids_first = True
    unwritten = 0

    async def flush(self) -> None:
        return None

    def written(self) -> bool:
        return True


def _node(node_id: str) -> tuple[Broker, ClusterHub, FlushScheduler]:
    broker = Broker(CoreSettings())
    store = cast(DurableStore, IdleStore())
    hub = ClusterHub(broker, NodeIdentity(node_id, 1, online=True), store)
    broker.cluster = hub
    broker.store = store
    broker.acks = AckGate(broker.settings.limits.receive_maximum)
    return broker, hub, FlushScheduler(asyncio.get_running_loop())


class Pipe:
    """Both directions of the A-B link."""

    def __init__(self, hub_a: ClusterHub, hub_b: ClusterHub) -> None:
        self.a = PeerLink(hub_a)
        self.b = PeerLink(hub_b)
        self.a_out = LinkTransport()
        self.b_out = LinkTransport()
        self.a.connection_made(self.a_out)  # type: ignore[arg-type]
        self.b.connection_made(self.b_out)  # type: ignore[arg-type]

    def move(self) -> tuple[bool, bool]:
        """Deliver what each side wrote; returns (A sent something, B sent something)."""
        to_b = self.a_out.take()
        to_a = self.b_out.take()
        if to_b:
            self.b.data_received(to_b)
        if to_a:
            self.a.data_received(to_a)
        return bool(to_b), bool(to_a)


async def run(pairs: int, messages: int, batch: int, profile: bool) -> None:
    broker_a, hub_a, sched_a = _node("node-a")
    broker_b, hub_b, sched_b = _node("node-b")
    pipe = Pipe(hub_a, hub_b)
    await asyncio.sleep(0)
    pipe.move()  # HELLOs
    publishers = []
    subscribers = []
    for n in range(pairs):
        sub, sub_t = await connect_client(broker_b, sched_b, f"s{n}")
        sub.data_received(encode(Subscribe(1, [SubscriptionRequest(f"p2p/{n}", 1)]), V5))
        pub, _ = await connect_client(broker_a, sched_a, f"p{n}")
        publishers.append((pub, n))
        subscribers.append((sub, sub_t))
    for _ in range(1000):  # ROUTE frames (the link paces them over several turns)
        await asyncio.sleep(0)
        pipe.move()
        if len(hub_a.table.routes) == pairs:
            break
    assert len(hub_a.table.routes) == pairs, "routes did not reach node A"
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
    turns = 0
    cycles = 0
    while sent < messages:
        start = time.process_time()
        if profiler:
            profiler.enable()
        chosen = []
        before = [subscribers[(index + k) % pairs][1].writes for k in range(batch)]
        for _ in range(batch):
            pub, n = publishers[index % pairs]
            pub.data_received(frames[n][(index // pairs) & 1])
            chosen.append(n)
            index += 1
        delivered = False
        for _ in range(50):  # until B has written to every subscriber of the cycle
            await asyncio.sleep(0)
            turns += 1
            pipe.move()
            if all(subscribers[n][1].writes > was for n, was in zip(chosen, before, strict=True)):
                delivered = True
                break
        for n in chosen:
            sub, sub_t = subscribers[n]
            packet_id = int.from_bytes(sub_t.last[-18:-16], "big")
            sub.data_received(pubacks[packet_id])
        if profiler:
            profiler.disable()
        cpu += time.process_time() - start
        assert delivered, "a message was lost"
        sent += batch
        cycles += 1
    await asyncio.sleep(0)
    per_message = cpu / sent * 1e6
    print(
        f"link p2p ({xmq.__file__}): {pairs} pairs, {sent} messages, {batch} per tick: "
        f"{per_message:.2f} us CPU/msg, {turns / cycles:.1f} loop turns per cycle"
    )
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)


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
