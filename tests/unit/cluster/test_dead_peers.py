"""Only both signs together release a peer's lease: its port refusing connections and its lease
not renewed for two renewal intervals (real Redis; the port check is the test's)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
import redis.asyncio as aioredis

from tests.support.node_leases import write_lease
from tests.support.redis_server import RedisServer, running_redis
from xmq.cluster.dead_peers import DeadPeers
from xmq.contract import ClusterKeys

pytestmark = pytest.mark.integration

KEYS = ClusterKeys("t-dead")
TTL_S = 1.0  # renewal every 0.2 s: released once unrenewed for 0.65 s


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with running_redis() as running:
        yield running


@pytest.fixture
async def clients(server: RedisServer) -> AsyncIterator[tuple[redis.Redis, aioredis.Redis]]:
    sync = server.client()
    sync.flushall()
    client = aioredis.Redis(host=server.host, port=server.port)
    yield sync, client
    await client.aclose()
    sync.close()


async def _watched(
    sync: redis.Redis, client: aioredis.Redis, refused: bool, renewing: bool
) -> tuple[bool, DeadPeers]:
    async def port_refuses(address: str) -> bool:
        return refused

    peers = DeadPeers(client, KEYS, TTL_S, port_refuses)
    write_lease(sync, KEYS, "b-0", 5, ttl_ms=int(TTL_S * 1000))
    peers.watch("b-0", 5, "127.0.0.1:1")
    for _ in range(10):  # 1.5 s: past the 0.65 s of silence, short of the lease TTL ...
        await asyncio.sleep(0.15)
        if renewing:  # ... unless renewed
            write_lease(sync, KEYS, "b-0", 5, ttl_ms=int(TTL_S * 1000))
    peers.stop()
    return bool(sync.exists(KEYS.lease("b-0"))), peers


async def test_a_silent_peer_whose_port_refuses_is_released(
    clients: tuple[redis.Redis, aioredis.Redis],
) -> None:
    sync, client = clients
    ttl_s = 3.0  # released once unrenewed for 2 x 3 / 5 + 0.25 = 1.45 s: 1.55 s left of it
    write_lease(sync, KEYS, "b-0", 5, ttl_ms=int(ttl_s * 1000))
    peers = DeadPeers(client, KEYS, ttl_s, lambda address: asyncio.sleep(0, True))
    peers.watch("b-0", 5, "127.0.0.1:1")
    ttl = -1
    while sync.exists(KEYS.lease("b-0")):  # at most the lease's 3 s (it expires by itself)
        ttl = sync.pttl(KEYS.lease("b-0"))
        await asyncio.sleep(0.02)
    for _ in range(50):  # the script's reply may reach the watcher after the key is gone
        if peers.released:
            break
        await asyncio.sleep(0.02)
    peers.stop()
    assert peers.released == 1  # not merely expired
    # released while the lease had time left, once 1.45 s silent: ``ttl`` is the last read
    # before the release, up to one 20 ms poll (and a loaded loop's lag) earlier than it
    assert 0 < ttl <= 3000 - 1450 + 100


async def test_a_peer_that_still_renews_or_still_listens_is_not_released(
    clients: tuple[redis.Redis, aioredis.Redis],
) -> None:
    sync, client = clients
    present, peers = await _watched(sync, client, refused=True, renewing=True)
    assert present and peers.released == 0  # cut off from us, alive for Redis
    sync.flushall()
    present, peers = await _watched(sync, client, refused=False, renewing=False)
    assert peers.released == 0  # something listens: paused, or a new process
    write_lease(sync, KEYS, "b-0", 6)  # a newer run is not the one watched
    peers = DeadPeers(client, KEYS, TTL_S, lambda address: asyncio.sleep(0, True))
    peers.watch("b-0", 5, "127.0.0.1:1")
    await asyncio.sleep(1.0)
    peers.stop()
    assert peers.released == 0 and sync.exists(KEYS.lease("b-0"))
