"""The attacks of ``bench/abuse_bench.py``: each one abusive client's doing against a broker.

Each takes the broker under attack and returns one line saying what the attacker got.
"""

from __future__ import annotations

import asyncio
import secrets
import time

from bench.abuse_broker import Broker
from bench.abuse_clients import Client, park_sessions
from xmq.codec.packets import (
    MQTT_5,
    Auth,
    Connect,
    Disconnect,
    Puback,
    Publish,
    Subscribe,
    SubscriptionRequest,
)
from xmq.codec.properties import Properties
from xmq.codec.writer import encode

PERSISTENT_CAP = 20_000
RETAINED_CAP = 10_000
RETAINED_BYTES_CAP = 32 * 1024 * 1024


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
