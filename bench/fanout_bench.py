"""Micro-benchmark of the broker's fan-out path (no sockets): one PUBLISH to N subscribers.

Measures ``Broker.publish`` -> ``Session.deliver`` -> ``ClientConnection.send_publish`` ->
the link's write buffer, with subscribers that acknowledge every message, so the in-flight
window never fills. Prints CPU nanoseconds per delivery. A fan-out of more than
``core.fanout_slices.SLICE`` subscribers is routed over several loop turns: their CPU counts.

    .venv/bin/python bench/fanout_bench.py [--subscribers 1000] [--qos 1] [--rounds 200]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from xmq.codec.packets import Connect, Subscribe, SubscriptionRequest
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.client_link import ClientLink
from xmq.core.connection import ClientConnection
from xmq.core.message import Message
from xmq.core.settings import CoreSettings


class SinkLink(ClientLink):
    """A ClientLink that keeps the bytes it is given (stands in for the socket)."""

    __slots__ = ("out", "peer")  # (``congested`` is the compiled base's field)

    peer: str

    def __init__(self) -> None:
        self.congested = False
        self.out = bytearray()
        self.peer = "127.0.0.1:1"

    def write(self, data: bytes) -> None:
        self.out += data

    def write_publish(self, head: bytes, packet_id: int, tail: bytes) -> None:
        out = self.out
        out += head
        if packet_id:
            out += packet_id.to_bytes(2, "big")
        out += tail

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def login_accepted(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _connect(broker: Broker, client_id: str) -> tuple[ClientConnection, SinkLink]:
    link = SinkLink()
    allow = AllowAll()
    conn = ClientConnection(broker, link, AnonymousAuthenticator(), allow)
    conn.handle(Connect(client_id=client_id))
    for _ in range(3):
        await asyncio.sleep(0)
    return conn, link


async def run(subscribers: int, qos: int, rounds: int) -> None:
    broker = Broker(CoreSettings())
    conns = []
    for n in range(subscribers):
        conn, link = await _connect(broker, f"s{n}")
        conn.handle(Subscribe(1, [SubscriptionRequest("bench/t", qos)]))
        link.out.clear()
        conns.append((conn, link))
    payload = b"0123456789abcdef"
    cpu = 0.0
    for _ in range(rounds):
        message = Message("bench/t", payload, qos, False, None, "p", 0.0)
        start = time.process_time()
        broker.publish(message)
        for _ in range(subscribers):  # more than a slice of subscribers: routed over turns
            if not broker.fanouts.waiting:
                break
            await asyncio.sleep(0)
        cpu += time.process_time() - start
        for conn, link in conns:
            session = conn.session
            assert session is not None
            for packet_id in list(session.inflight):
                session.on_puback(packet_id, 0.0)
            link.out.clear()
    deliveries = subscribers * rounds
    print(
        f"fan-out qos{qos}: {subscribers} subscribers x {rounds} publishes: "
        f"{cpu / deliveries * 1e9:,.0f} ns CPU per delivery"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--qos", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(run(args.subscribers, args.qos, args.rounds))


if __name__ == "__main__":
    main()
