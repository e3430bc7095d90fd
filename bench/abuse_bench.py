"""One abusive client at a time next to 100 well-behaved ones (issue 13), against a real broker.

For each attack a fresh ``xmq serve`` (one node, in memory, ``$SYS`` off; for the cross-node
row node-2 of a cluster on a throw-away ``redis-server``, node-1 started by the attack) is
started; 100
well-behaved MQTT 5 clients connect, subscribe and exchange QoS 1 messages (each publishes to
the next one's topic every 50 ms) while a prober opens a new connection every 100 ms; after a
warm-up the attack runs. Reported per attack: the well-behaved clients' CONNACK and delivery
p99 during the attack, the longest event-loop stall (the broker's 10 ms loop-lag sampler,
``xmq_event_loop_lag_max_seconds``, polled every 250 ms) and, in brackets, the CPU time the
loop's thread spent in the worst stall (``xmq_event_loop_busy_max_seconds``: the rest is
waiting for a CPU on a shared host), the ``/healthz`` statuses seen, RSS
before/after, what the broker refused (CONNACK, SUBACK, DISCONNECT, PUBACK reasons, caps and
drops, from ``/metrics``) and the tracebacks in its log, and which targets it missed: a
stall over 100 ms (wall clock or loop CPU), ``/healthz`` not 200, RSS growth over
``limits.memory_budget_bytes`` (64 MiB here) plus a 40 MiB baseline, any traceback. Not a
timed test: a table to read.

    .venv/bin/python bench/abuse_bench.py [--attack NAME ...] [--markdown]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from xmq.app.cluster_cli import start_redis
from xmq.auth.verifiers import HashPolicy, derive_scram_credentials, hash_password
from xmq.codec.packets import (
    MQTT_5,
    Auth,
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

_LISTENING = re.compile(r"^xmq: listening (\S+) \S+ \S+:(\d+)$")
_SAMPLE = re.compile(r"^([a-z_]+)(\{[^}]*\})? (\S+)$")
GOOD_CLIENTS = 100
GOOD_PASSWORD = "good-password"
BUDGET = 64 * 1024 * 1024
"""``limits.memory_budget_bytes`` of every broker the bench starts."""
BASELINE = 40 * 1024 * 1024
"""The RSS target: at most the budget plus this fixed baseline of growth during an attack
(as ``tests/integration/broker/test_memory_budget.py``)."""
MAX_STALL_S = 0.1
PERSISTENT_CAP = 20_000
RETAINED_CAP = 10_000
RETAINED_BYTES_CAP = 32 * 1024 * 1024


# -- the broker --------------------------------------------------------------------------------


class Broker:
    """A broker subprocess with its listener ports."""

    def __init__(self, config: str, node_id: str | None = None) -> None:
        self.config = config
        self.dir = tempfile.TemporaryDirectory(prefix="xmq-abuse-")
        path = Path(self.dir.name) / "xmq.yaml"
        path.write_text(config)
        self.log_path = Path(self.dir.name) / "broker.log"
        env = dict(os.environ, XMQ_SYS__INTERVAL_S="0", XMQ_METRICS__PORT="0")
        if node_id is not None:  # a cluster member (``cluster_config``)
            env["XMQ_NODE_ID"] = node_id
        env["XMQ_LIMITS__MEMORY_BUDGET_BYTES"] = str(BUDGET)
        env["XMQ_METRICS__HOST"] = "127.0.0.1"
        args = [sys.executable, "-m", "xmq", "serve", "--config", str(path)]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=self.log_path.open("wb"), env=env, text=True
        )
        self.ports: dict[str, int] = {}
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 30
        while "metrics" not in self.ports and time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"broker did not start:\n{self.log_path.read_text()}")
            match = _LISTENING.match(line.strip())
            if match:
                self.ports[match.group(1)] = int(match.group(2))
        self.port = self.ports["mqtt"]

    def rss(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def http(self, path: str, timeout: float = 2.0) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.ports['metrics']}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, ""
        except OSError:
            return 0, ""  # no answer in time

    def metrics(self) -> dict[str, float]:
        _, body = self.http("/metrics", timeout=10)
        samples: dict[str, float] = {}
        for line in body.splitlines():
            match = _SAMPLE.match(line)
            if match:
                samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
        return samples

    def tracebacks(self) -> int:
        return self.log_path.read_text(errors="replace").count("Traceback")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.dir.cleanup()


# -- clients -----------------------------------------------------------------------------------


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


# -- the attacks -------------------------------------------------------------------------------


async def _retain(port: int, topics: list[str]) -> None:
    client = await Client.open(port)
    await client.connect("retainer")
    for start in range(0, len(topics), 1000):
        for topic in topics[start : start + 1000]:
            client.send(Publish(topic=topic, payload=b"r", qos=0, retain=True))
        await client.writer.drain()
    client.send(Disconnect())
    await asyncio.sleep(1)
    client.close()


async def _drain(client: Client, seconds: float) -> int:
    """Read what the broker sends for a while; return the retained messages read."""
    count = 0
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            packet = await asyncio.wait_for(client.read(), left)
        except TimeoutError:
            break
        if packet is None:
            break
        count += isinstance(packet, Publish) and packet.retain
    return count


async def no_attack(broker: Broker) -> str:
    await asyncio.sleep(10)
    return "10 s of well-behaved traffic only"


async def subscribe_hash_x1000(broker: Broker) -> str:
    await _retain(broker.port, [f"r/{n % 50}/{n:05d}" for n in range(5000)])
    got = await _subscribe_hash(broker, 1000)
    return f"{got} retained messages received (5,000 retained)"


async def _subscribe_hash(broker: Broker, times: int) -> int:
    """One SUBSCRIBE listing `#` `times` times; the retained messages received in 10 s."""
    client = await Client.open(broker.port)
    await client.connect("abuser")
    client.send(Subscribe(1, [SubscriptionRequest("#", 0)] * times))
    got = await _drain(client, 10)
    client.close()
    return got


async def deep_retained(broker: Broker) -> str:
    refused = 0
    for n in range(20):
        client = await Client.open(broker.port)
        await client.connect(f"deep-{n}")
        client.send(Publish(topic="/" * 64990 + f"{n}", payload=b"r", retain=True))
        packet = await client.read()
        if isinstance(packet, Disconnect):
            refused += 1
        client.close()
    await _retain(broker.port, ["/".join(["d"] * 126) + f"/{n}" for n in range(200)])
    got = await _subscribe_hash(broker, 200)
    return f"{refused}/20 65,000-level topics refused; 200 x # got {got} of 200 (127 levels)"


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


async def offline_fanout(broker: Broker) -> str:
    await park_sessions(broker.port, "offline-", "bcast/#", 2000)
    flood = await Client.open(broker.port)
    await flood.connect("flood")
    data = b"".join(
        encode(Publish(topic="bcast", payload=b"1", qos=1, packet_id=n), MQTT_5)
        for n in range(1, 3001)
    )
    started = time.monotonic()
    flood.writer.write(data)
    acks = 0
    while acks < 3000 and (packet := await flood.read()) is not None:
        acks += isinstance(packet, Puback)
    flood.close()
    took = time.monotonic() - started
    return f"{len(data)} B read: {acks}/3000 PUBACKs in {took:.1f} s to 2,000 offline sessions"


async def _publish_wide(port: int) -> tuple[list[int], float]:
    """10 QoS 1 PUBLISH to ``wide/x``, back to back: their PUBACK reasons and the seconds."""
    publisher = await Client.open(port)
    await publisher.connect("wide-publisher")
    started = time.monotonic()
    for n in range(1, 11):  # each PUBLISH reaches every parked session
        publisher.send(Publish(topic="wide/x", payload=b"1", qos=1, packet_id=n))
    acks: list[int] = []
    while len(acks) < 10 and (packet := await publisher.read()) is not None:
        if isinstance(packet, Puback):
            acks.append(packet.reason_code)
    publisher.close()
    return acks, time.monotonic() - started


def _codes(acks: list[int]) -> str:
    return ", ".join(sorted({f"0x{code:02x}" for code in acks}))


async def one_publish_fanout(broker: Broker) -> str:
    codes = await park_sessions(broker.port, "wide-", "wide/#", 20_000)
    acks, took = await _publish_wide(broker.port)
    return (
        f"{codes.get(0, 0)} sessions parked; 10 PUBLISH x 20,000 sessions: {len(acks)}/10 "
        f"PUBACKs ({_codes(acks)}) in {took:.1f} s"
    )


def cluster_config(redis_url: str) -> str:
    """The configuration section that makes a bench broker a member of one cluster."""
    return (
        f"cluster: {{redis_url: '{redis_url}', name: abuse, link_host: 127.0.0.1, link_port: 0}}\n"
    )


async def _linked(node: Broker, peer: str) -> None:
    deadline = time.monotonic() + 30
    key = f'xmq_cluster_link_up{{peer="{peer}"}}'
    while (await asyncio.to_thread(node.metrics)).get(key) != 1.0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no link to {peer}")
        await asyncio.sleep(0.2)


async def peer_fanout(broker: Broker) -> str:
    """The measured broker is node-2 of a cluster (Redis, ``max_queued_writes`` 0): node-1,
    started here, forwards 10 PUBLISH frames that each reach 20,000 persistent sessions on
    node-2; node-1's publisher gets its PUBACKs once node-2 has recorded every slice."""
    # started and stopped on a thread: both block (the start reads the node's output until it
    # listens), and this loop runs the well-behaved clients, whose times must be the broker's
    peer = await asyncio.to_thread(Broker, broker.config, "node-1")
    try:
        await _linked(peer, "node-2")
        codes = await park_sessions(broker.port, "wide-", "wide/#", 20_000)
        await asyncio.sleep(1)  # the last durable subscriptions reach node-1
        acks, took = await _publish_wide(peer.port)  # node-1 forwards the frames together
    finally:
        await asyncio.to_thread(peer.stop)
    return (
        f"{codes.get(0, 0)} sessions parked on this node; 10 PUBLISH x 20,000 from node-1: "
        f"{len(acks)}/10 PUBACKs ({_codes(acks)}) in {took:.1f} s"
    )


async def many_client_ids(broker: Broker) -> str:
    codes = await park_sessions(broker.port, "id-", "ids/#", 50_000)
    return f"{PERSISTENT_CAP:,} persistent sessions cap; 50,000 client ids: " + ", ".join(
        f"{count} x 0x{code:02x}" if code >= 0 else f"{count} x no CONNACK"
        for code, count in sorted(codes.items())
    )


async def retained_caps(broker: Broker) -> str:
    client = await Client.open(broker.port)
    await client.connect("retainer")
    outcome = [f"caps {RETAINED_CAP:,} messages / {RETAINED_BYTES_CAP >> 20} MiB"]
    for count, size in ((500, 100_000), (15_000, 100)):  # the bytes cap, then the count cap
        codes: dict[int, int] = {}
        payload = b"r" * size
        for start in range(0, count, 500):
            for n in range(start, start + 500):
                topic = f"caps/{size}/{n}"
                publish = Publish(topic=topic, payload=payload, qos=1, retain=True, packet_id=n + 1)
                client.send(publish)
            got = 0
            while got < 500 and (packet := await client.read()) is not None:
                if isinstance(packet, Puback):
                    got += 1
                    codes[packet.reason_code] = codes.get(packet.reason_code, 0) + 1
        outcome.append(
            f"{count:,} retained x {size:,} B: "
            + ", ".join(f"{c} x 0x{k:02x}" for k, c in sorted(codes.items()))
        )
        if size > 100:  # cleared again (an empty retained message) for the count cap
            for n in range(count):
                client.send(Publish(topic=f"caps/{size}/{n}", payload=b"", retain=True))
    client.send(Disconnect())
    await asyncio.sleep(1)
    client.close()
    retained = broker.metrics().get("xmq_retained_messages", 0)
    return "; ".join(outcome) + f"; {retained:.0f} held"


def _scram_first(user: str) -> tuple[Properties, bytes]:
    props = Properties()
    props.authentication_method = "SCRAM-SHA-256"
    first = f"n,,n={user},r={secrets.token_urlsafe(18)}".encode()
    props.authentication_data = first
    return props, first


async def abandoned_scram(broker: Broker) -> str:
    clients = []
    for n in range(50):
        client = await Client.open(broker.port)
        props, _ = _scram_first("good")
        client.send(Connect(client_id=f"scram-{n}", properties=props))
        reply = await asyncio.wait_for(client.read(), 10)
        if isinstance(reply, Auth):
            big = Publish(topic="held", payload=b"x" * 60_000, qos=0)
            for _ in range(100):  # packets sent before authentication completes
                client.send(big)
        clients.append(client)
    await asyncio.sleep(35)
    open_ = 0
    for client in clients:
        try:
            packet = await asyncio.wait_for(client.read(), 0.2)
            open_ += packet is not None and not client.reader.at_eof()
        except TimeoutError:
            open_ += 1
        client.close()
    return f"{open_}/50 abandoned SCRAM exchanges still open after 35 s"


async def unauthenticated_flood(broker: Broker) -> str:
    client = await Client.open(broker.port)
    client.send(Connect(client_id="unauth", username="good", password=b"wrong-password"))
    big = encode(Publish(topic="held", payload=b"x" * 60_000, qos=0), MQTT_5)
    sent = 0
    try:
        for _ in range(3000):  # 180 MB while the password is being checked
            client.writer.write(big)
            sent += len(big)
            await asyncio.wait_for(client.writer.drain(), 5)
    except (OSError, TimeoutError):
        pass
    client.close()
    return f"{sent / 1e6:.0f} MB sent behind a CONNECT with a wrong password"


async def wrong_login_flood(broker: Broker) -> str:
    async def wrong(n: int) -> int:
        try:
            client = await Client.open(broker.port, local=f"127.0.{n // 250}.{n % 250 + 2}")
            ack = await asyncio.wait_for(
                client.connect(f"wrong-{n}", username="good", password=b"bad"), 60
            )
            client.close()
            return ack.reason_code if ack is not None else -1
        except (OSError, TimeoutError):
            return -1

    codes: dict[int, int] = {}
    for _ in range(3):
        for code in await asyncio.gather(*(wrong(n) for n in range(60))):
            codes[code] = codes.get(code, 0) + 1
    return "60 concurrent wrong logins x 3 from 60 addresses: " + ", ".join(
        f"{count} x 0x{code:02x}" if code >= 0 else f"{count} x no answer"
        for code, count in sorted(codes.items())
    )


async def half_proxy_headers(broker: Broker) -> str:
    port = broker.ports["proxied"]
    writers = []
    for _ in range(1000):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            continue
        writer.write(b"PROXY TCP4 127.0.0.1 ")
        writers.append(writer)
    await asyncio.sleep(8)
    for writer in writers:
        writer.close()
    return f"{len(writers)} half-sent PROXY headers held 8 s"


async def queued_flood(broker: Broker) -> str:
    await park_sessions(broker.port, "parked-", "flood/#", 1)
    flood = await Client.open(broker.port)
    await flood.connect("flooder")
    sent = 0
    for start in range(0, 400_000, 5000):
        flood.writer.write(
            b"".join(
                encode(Publish(topic=f"flood/{n}", payload=b"1", qos=1, packet_id=n % 65000 + 1), 5)
                for n in range(start, start + 5000)
            )
        )
        for _ in range(5000):
            await flood.read()
        sent += 5000
    flood.close()
    queued = broker.metrics().get("xmq_queued_bytes", 0)
    return f"{sent} one-byte QoS 1 to an offline session; xmq_queued_bytes {queued / 2**20:.0f} MiB"


@dataclass
class Attack:
    name: str
    run: Callable[[Broker], Awaitable[str]]
    config: str = ""
    login: dict[str, object] = field(default_factory=dict)
    cluster: bool = False
    """Run against node-2 of a cluster on a Redis of its own (the attack starts node-1)."""


def _accounts(directory: Path) -> Path:
    scram = derive_scram_credentials(GOOD_PASSWORD, iterations=4096)
    path = directory / "accounts.yaml"
    verifier = hash_password(GOOD_PASSWORD, HashPolicy())
    path.write_text(f'users:\n  good:\n    password: "{verifier}"\n    scram: "{scram.encode()}"\n')
    return path


def attacks(workdir: Path) -> list[Attack]:
    accounts = _accounts(workdir)
    auth = f"auth: {{allow_anonymous: false, accounts_file: {accounts}}}\n"
    login: dict[str, object] = {"username": "good", "password": GOOD_PASSWORD.encode()}
    return [
        Attack("(no attack: the noise floor)", no_attack),
        Attack("subscribe # x1000 vs 5,000 retained", subscribe_hash_x1000),
        Attack("200 x # vs deep retained topics", deep_retained),
        Attack("offline fan-out flood (2,000 x 3,000)", offline_fanout),
        Attack("one PUBLISH to 20,000 offline sessions x10", one_publish_fanout),
        Attack("the same from another node (20,000 x10)", peer_fanout, cluster=True),
        Attack(
            "50,000 persistent client ids",
            many_client_ids,
            f"limits: {{max_persistent_sessions: {PERSISTENT_CAP}}}\n",
        ),
        Attack(
            "retained caps",
            retained_caps,
            f"limits: {{max_retained_messages: {RETAINED_CAP}, "
            f"max_retained_bytes: {RETAINED_BYTES_CAP}}}\n",
        ),
        Attack("abandoned SCRAM x50", abandoned_scram, auth, login),
        Attack("unauthenticated flood", unauthenticated_flood, auth, login),
        Attack("wrong-login flood, 60 addresses", wrong_login_flood, auth, login),
        Attack(
            "half-sent PROXY headers x1000",
            half_proxy_headers,
            "listeners:\n  - {name: mqtt, protocol: tcp, host: 127.0.0.1, port: 0}\n"
            "  - {name: proxied, protocol: tcp, host: 127.0.0.1, port: 0, "
            "proxy_protocol: required}\n",
        ),
        Attack(
            f"queued flood vs {BUDGET >> 20} MiB budget",
            queued_flood,
            "limits: {max_queued_messages: 10000000, max_queued_bytes: 4000000000}\n",
        ),
    ]


# -- measuring ---------------------------------------------------------------------------------


@dataclass
class Row:
    attack: str
    connack_p99_ms: float
    delivery_p99_ms: float
    failed_connects: int
    stall_ms: float
    busy_ms: float
    healthz: str
    rss_before_mb: float
    rss_after_mb: float
    refused: str
    tracebacks: int
    outcome: str
    load: float  # the host's 1-minute load average at the end of the attack
    own_lag_ms: float  # this process's longest loop lag: the well-behaved clients' own stall

    def missed(self) -> list[str]:
        """The targets this attack missed: stall (wall clock, loop CPU), /healthz, RSS
        growth over the budget plus the baseline, tracebacks."""
        missed = []
        if self.stall_ms > MAX_STALL_S * 1000:
            missed.append("wall stall")
        if self.busy_ms > MAX_STALL_S * 1000:
            missed.append("CPU stall")
        if "503" in self.healthz or "no answer" in self.healthz:
            missed.append("/healthz")
        if self.rss_after_mb - self.rss_before_mb > (BUDGET + BASELINE) / 2**20:
            missed.append("RSS")
        if self.tracebacks:
            missed.append("tracebacks")
        return missed


def _p99(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


_REFUSALS = (
    "xmq_connects_refused_total",
    "xmq_subscriptions_refused_total",
    "xmq_disconnects_total",
    "xmq_cap_refusals_total",
    "xmq_messages_dropped_by_reason_total",
)


def _refused(before: dict[str, float], after: dict[str, float]) -> str:
    parts = []
    for key, value in sorted(after.items()):
        if key.startswith(_REFUSALS) and (delta := value - before.get(key, 0)) > 0:
            kind = key.split("{")[0].removeprefix("xmq_").removesuffix("_total")
            label = key[key.index('"') + 1 : -2] if "{" in key else ""
            parts.append(f"{kind} {label} {int(delta)}")
    return "; ".join(parts) or "-"


async def _watch(
    broker: Broker, stalls: list[float], busy: list[float], health: dict[str, int]
) -> None:
    while True:
        status, _ = await asyncio.to_thread(broker.http, "/healthz", 2.0)
        key = str(status) if status else "no answer"
        health[key] = health.get(key, 0) + 1
        metrics = await asyncio.to_thread(broker.metrics)
        stalls.append(metrics.get("xmq_event_loop_lag_max_seconds", 0.0))
        busy.append(metrics.get("xmq_event_loop_busy_max_seconds", 0.0))
        await asyncio.sleep(0.25)


async def _own_lag(lags: list[float]) -> None:
    """This process's loop lag, sampled every 10 ms: the well-behaved clients and the
    attacker share the loop, so a CONNACK or delivery time is the broker's only while this
    stays small."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + 0.01
        await asyncio.sleep(0.01)
        lags.append(loop.time() - due)


async def measure(attack: Attack) -> Row:
    if not attack.cluster:
        return await _measure(attack, attack.config)
    with tempfile.TemporaryDirectory(prefix="xmq-abuse-redis-") as data_dir:
        redis_proc, url = start_redis(data_dir)
        try:
            return await _measure(attack, attack.config + cluster_config(url), "node-2")
        finally:
            redis_proc.terminate()
            redis_proc.wait()


async def _measure(attack: Attack, config: str, node_id: str | None = None) -> Row:
    if "listeners:" not in config:
        config += "listeners:\n  - {name: mqtt, protocol: tcp, host: 127.0.0.1, port: 0}\n"
    broker = Broker(config, node_id)
    good = WellBehaved(broker, attack.login)
    try:
        await good.start()
        await asyncio.sleep(2)
        rss_before = broker.rss()
        before = await asyncio.to_thread(broker.metrics)
        stalls: list[float] = []
        busy: list[float] = []
        health: dict[str, int] = {}
        watcher = asyncio.create_task(_watch(broker, stalls, busy, health))
        own: list[float] = [0.0]
        own_watcher = asyncio.create_task(_own_lag(own))
        good.seen.recording = True
        outcome = await asyncio.wait_for(attack.run(broker), 300)
        await asyncio.sleep(3)
        good.seen.recording = False
        watcher.cancel()
        own_watcher.cancel()
        after = await asyncio.to_thread(broker.metrics)
        stalls.append(after.get("xmq_event_loop_lag_max_seconds", 0.0))
        busy.append(after.get("xmq_event_loop_busy_max_seconds", 0.0))
        return Row(
            attack.name,
            _p99(good.seen.connack_s),
            _p99(good.seen.delivery_s),
            good.seen.failed_connects,
            max(stalls) * 1000,
            max(busy) * 1000,
            ", ".join(f"{k}: {v}" for k, v in sorted(health.items())),
            rss_before / 2**20,
            broker.rss() / 2**20,
            _refused(before, after),
            broker.tracebacks(),
            outcome,
            os.getloadavg()[0],
            max(own) * 1000,
        )
    finally:
        good.stop()
        broker.stop()


def markdown(rows: list[Row]) -> str:
    lines = [
        "| attack | CONNACK p99 | delivery p99 | longest stall (CPU) | /healthz "
        "| RSS before → after "
        "| refused (reason: count) | tracebacks | what the attacker got | load "
        "| bench's own lag | targets |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        failed = f" ({r.failed_connects} failed)" if r.failed_connects else ""
        lines.append(
            f"| {r.attack} | {r.connack_p99_ms:.0f} ms{failed} | {r.delivery_p99_ms:.0f} ms "
            f"| {r.stall_ms:.0f} ms ({r.busy_ms:.0f}) | {r.healthz} | {r.rss_before_mb:.0f} → "
            f"{r.rss_after_mb:.0f} MB | {r.refused} | {r.tracebacks} | {r.outcome} "
            f"| {r.load:.1f} | {r.own_lag_ms:.0f} ms "
            f"| {'missed: ' + ', '.join(r.missed()) if r.missed() else 'met'} |"
        )
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attack", action="append", help="substring of the attacks to run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="xmq-abuse-") as workdir:
        chosen = [
            attack
            for attack in attacks(Path(workdir))
            if not args.attack or any(part in attack.name for part in args.attack)
        ]
        rows = []
        for attack in chosen:
            print(f"-- {attack.name}", file=sys.stderr, flush=True)
            try:
                row = await measure(attack)
            except Exception as error:  # report the attack as not measured, run the others
                print(f"{attack.name}: {error!r}", file=sys.stderr, flush=True)
                continue
            print(row, file=sys.stderr, flush=True)
            rows.append(row)
    print(markdown(rows))
    print(f"load average {' '.join(f'{v:.1f}' for v in os.getloadavg())} at the end")


if __name__ == "__main__":
    asyncio.run(main())
