"""The clients of ``bench/abuse_bench.py``: a raw MQTT 5 client, the well-behaved hundred.

``WellBehaved`` is the load whose CONNACK and delivery times are measured during an attack;
``park_sessions`` leaves persistent sessions offline (an attack's set-up, and the tests').
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from bench.abuse_broker import Broker
from xmq.codec.packets import (
    MQTT_5,
    Connack,
    Connect,
    Disconnect,
    Puback,
    Publish,
    Subscribe,
    SubscriptionRequest,
)
from xmq.codec.properties import Properties
from xmq.codec.reader import PacketReader
from xmq.codec.writer import encode

GOOD_CLIENTS = 100


class Client:
    """A minimal asyncio MQTT 5 client over raw packets."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = PacketReader(protocol_version=MQTT_5)
        self.pending: list[object] = []

    @classmethod
    async def open(cls, port: int, local: str | None = None) -> Client:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, local_addr=(local, 0) if local else None, limit=1 << 20
        )
        return cls(reader, writer)

    def send(self, packet: object) -> None:
        self.writer.write(encode(packet, MQTT_5))  # type: ignore[arg-type]

    async def read(self) -> object | None:
        while not self.pending:
            data = await self.reader.read(1 << 16)
            if not data:
                return None
            self.pending.extend(self.decoder.feed(data))
        return self.pending.pop(0)

    async def connect(self, client_id: str, **connect: object) -> Connack | None:
        self.send(Connect(client_id=client_id, **connect))  # type: ignore[arg-type]
        packet = await self.read()
        return packet if isinstance(packet, Connack) else None

    def close(self) -> None:
        self.writer.close()


@dataclass
class Observed:
    connack_s: list[float] = field(default_factory=list)
    delivery_s: list[float] = field(default_factory=list)
    failed_connects: int = 0
    recording: bool = False


class WellBehaved:
    """100 clients exchanging QoS 1 messages, and a prober connecting every 100 ms."""

    def __init__(self, broker: Broker, login: dict[str, object]) -> None:
        self.broker = broker
        self.login = login
        self.seen = Observed()
        self.clients: list[Client] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for n in range(GOOD_CLIENTS):
            client = await Client.open(self.broker.port)
            ack = await client.connect(f"good-{n}", **self.login)
            assert ack is not None and ack.reason_code == 0, ack
            client.send(Subscribe(1, [SubscriptionRequest(f"good/{n}", 1)]))
            self.clients.append(client)
            self.tasks.append(asyncio.create_task(self._receive(client)))
        self.tasks.append(asyncio.create_task(self._publish()))
        self.tasks.append(asyncio.create_task(self._probe()))

    async def _receive(self, client: Client) -> None:
        while (packet := await client.read()) is not None:
            if isinstance(packet, Publish):
                if self.seen.recording:
                    self.seen.delivery_s.append(time.monotonic() - float(packet.payload))
                if packet.qos:
                    client.send(Puback(packet.packet_id))

    async def _publish(self) -> None:
        packet_id = 0
        while True:
            packet_id = packet_id % 65000 + 1
            stamp = repr(time.monotonic()).encode()
            for n, client in enumerate(self.clients):
                topic = f"good/{(n + 1) % GOOD_CLIENTS}"
                client.send(Publish(topic=topic, payload=stamp, qos=1, packet_id=packet_id))
            await asyncio.sleep(0.05)

    async def _probe(self) -> None:
        n = 0
        while True:
            n += 1
            started = time.monotonic()
            try:
                client = await Client.open(self.broker.port)
                ack = await asyncio.wait_for(client.connect(f"probe-{n}", **self.login), 30)
                if ack is not None and ack.reason_code == 0:
                    if self.seen.recording:
                        self.seen.connack_s.append(time.monotonic() - started)
                    client.send(Disconnect())
                elif self.seen.recording:
                    self.seen.failed_connects += 1
                client.close()
            except (OSError, TimeoutError):
                if self.seen.recording:
                    self.seen.failed_connects += 1
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for client in self.clients:
            client.close()


async def park_sessions(
    port: int, prefix: str, topic_filter: str, count: int, concurrency: int = 100
) -> dict[int, int]:
    """Leave ``count`` persistent sessions (client ids ``prefix0``, ...) subscribed to
    ``topic_filter`` offline, ``concurrency`` connections at a time (each sends CONNECT,
    SUBSCRIBE and DISCONNECT in one write); return how many got each CONNACK reason code
    (-1: no CONNACK)."""
    props = Properties()
    props.session_expiry_interval = 3600
    subscribe = encode(Subscribe(1, [SubscriptionRequest(topic_filter, 1)]), MQTT_5)
    bye = encode(Disconnect(), MQTT_5)
    codes: dict[int, int] = {}
    numbers = iter(range(count))

    async def park(n: int) -> None:
        connect = Connect(client_id=f"{prefix}{n}", clean_start=False, properties=props)
        code = -1
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(encode(connect, MQTT_5) + subscribe + bye)
            data = await asyncio.wait_for(reader.read(1 << 16), 60)
            packets = PacketReader(protocol_version=MQTT_5).feed(data) if data else []
            if packets and isinstance(packets[0], Connack):
                code = packets[0].reason_code
            writer.close()
        except (OSError, TimeoutError):
            pass
        codes[code] = codes.get(code, 0) + 1

    async def parker() -> None:
        # ``concurrency`` tasks taking the next number: not one task per session, whose
        # creation (20,000 at once) would stall this process's loop, the prober's too
        for n in numbers:
            await park(n)

    await asyncio.gather(*(parker() for _ in range(concurrency)))
    return codes
