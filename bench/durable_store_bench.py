"""Micro-benchmark of the durable write path (no MQTT sockets): group commit vs one round trip.

Drives the real ``RedisSessionStore`` and ``RedisBatcher`` against a real Redis the way a
node with ``max_queued_writes: 0`` does for point-to-point traffic: C concurrent publishers,
each delivering one QoS 1 message to its own persistent (offline) session, waiting until the
message's record is written (the held PUBACK), then acknowledging it (its removal rides in the
next record's ``FENCED_WRITES`` call) and going on.
C = 1 is "one round trip per message"; larger C shows what group commit gets out of the same
Redis. Prints records/s, records per pipeline (round trip), Redis CPU per record and this
process's CPU per record.

    .venv/bin/python bench/durable_store_bench.py --redis-url redis://127.0.0.1:6379/0 \
        [--concurrency 1,10,100,1000] [--seconds 5]

Without ``--redis-url`` it starts a throwaway ``redis-server`` (appendonly yes, everysec).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import redis
import uvloop

from xmq.contract import ClusterKeys, NodeLease
from xmq.core.cluster_ports import DurableContext, NodeIdentity
from xmq.core.message import Message
from xmq.core.session import QueueLimits, Session
from xmq.core.stats import BrokerStats
from xmq.store.redis_batcher import RedisBatcher
from xmq.store.redis_session_store import RedisSessionStore

KEYS = ClusterKeys("bench-durable")
PAYLOAD = b"0123456789abcdef"


class RecordWait:
    """The ``DurableHold`` of one message: done once its record is written."""

    __slots__ = ("future", "holds")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.future: asyncio.Future[None] = loop.create_future()
        self.holds = 0

    def hold(self) -> None:
        self.holds += 1

    def release(self) -> None:
        self.holds -= 1
        if not self.holds and not self.future.done():
            self.future.set_result(None)

    def fail(self) -> None:
        if not self.future.done():
            self.future.set_exception(RuntimeError("a record was not written"))

    def undelivered(self, reason: int) -> None:
        self.release()  # no node link here: never called


async def _publisher(store: RedisSessionStore, session: Session, stop_at: float) -> int:
    loop = asyncio.get_running_loop()
    sent = 0
    while loop.time() < stop_at:
        wait = RecordWait(loop)
        message = Message("bench/durable", PAYLOAD, 1, False, None, "pub", 0.0)
        session.deliver(message, 1, False, (), None, 0.0, DurableContext(wait))
        await wait.future  # the held PUBACK would go now
        delivery = session.queue.popleft()  # offline session: queued after its record
        session.unqueued(delivery)
        store.acknowledged(session, delivery)  # the subscriber's PUBACK: its removal
        sent += 1
    return sent


def _redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def run_level(url: str, concurrency: int, seconds: float) -> str:
    batcher = RedisBatcher(url)
    await batcher.start()
    identity = NodeIdentity("bench", 1, online=True)
    store = RedisSessionStore(batcher, KEYS, identity, {}, time.monotonic)
    client = redis.Redis.from_url(url)
    lease = NodeLease(
        node_id="bench", pod_name="bench", pod_uid="bench", address="127.0.0.1:1", epoch=1,
        started_at=time.time(),
    )  # fmt: skip
    client.set(KEYS.lease("bench"), lease.to_json(), px=int((seconds + 60) * 1000))  # fencing
    stats = BrokerStats()
    limits = QueueLimits(1000, 1 << 20, 1 << 30, 10)
    sessions = []
    for n in range(concurrency):
        session = Session(f"durable-{n}", limits, stats, expiry_s=3600)
        session.store = store
        sessions.append(session)
    redis_cpu = _redis_cpu(client)
    pipelines = batcher.pipelines
    cpu = time.process_time()
    started = time.monotonic()
    stop_at = asyncio.get_running_loop().time() + seconds
    counts = await asyncio.gather(*(_publisher(store, s, stop_at) for s in sessions))
    await batcher.flush()
    elapsed = time.monotonic() - started
    cpu = time.process_time() - cpu
    redis_cpu = _redis_cpu(client) - redis_cpu
    records = sum(counts)
    per_pipeline = records / max(1, batcher.pipelines - pipelines)
    client.close()
    await batcher.close()
    return (
        f"concurrency {concurrency:>5}: {records / elapsed:>9,.0f} records/s  "
        f"{per_pipeline:>7.1f} records/pipeline  "
        f"redis {redis_cpu / records * 1e6:>5.1f} us/record  "
        f"this process {cpu / records * 1e6:>5.1f} us/record"
    )


@contextlib.contextmanager
def _redis_server() -> Iterator[str]:
    server = shutil.which("redis-server")
    if server is None:
        raise SystemExit("redis-server not found: pass --redis-url")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as work:
        process = subprocess.Popen(
            [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes", "--appendfsync", "everysec", "--dir", work],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            url = f"redis://127.0.0.1:{port}/0"
            client = redis.Redis.from_url(url)
            for _ in range(100):
                with contextlib.suppress(redis.ConnectionError):
                    client.ping()
                    break
                time.sleep(0.05)
            client.close()
            yield url
        finally:
            process.terminate()
            process.wait()


async def run(url: str, levels: list[int], seconds: float) -> None:
    for concurrency in levels:
        print(await run_level(url, concurrency, seconds), flush=True)
        client = redis.Redis.from_url(url)
        client.delete(*[KEYS.session_queue(f"durable-{n}") for n in range(concurrency)])
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis-url", default="")
    parser.add_argument("--concurrency", default="1,10,100,1000")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    levels = [int(part) for part in args.concurrency.split(",")]
    if args.redis_url:
        uvloop.run(run(args.redis_url, levels, args.seconds))
        return
    with _redis_server() as url:
        uvloop.run(run(url, levels, args.seconds))


if __name__ == "__main__":
    main()
