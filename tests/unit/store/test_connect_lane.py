"""A connect-path call does not wait behind another client's bulk of durable records.

Real Redis. A session claim (``call_script(..., ahead=True)``) goes before the records queued
ahead of it that write none of its keys, never before a plain command or a record of a key it
names; and a pipeline carries at most ``MAX_PIPELINE_ITEMS`` records, so the batch in flight
that a claim waits for is bounded as well. Before it, a CONNECT during a fan-out to 20,000
persistent sessions waited behind up to ``RECORDS_AHEAD`` records (issue 13).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.redis_server import RedisServer, running_redis
from xmq.store.redis_batcher import MAX_PIPELINE_ITEMS, RedisBatcher, ScriptCall, script_call

pytestmark = pytest.mark.integration  # a real Redis

PUSH_EACH = """
local replies = {}
for i, key in ipairs(KEYS) do
  redis.call('RPUSH', key, ARGV[i])
  replies[i] = redis.call('INCR', 'lane:executed')
end
return replies
"""
"""Each record pushed, and numbered in the order Redis executes it."""
CLAIM = "return redis.call('INCR', 'lane:executed')"
"""A stand-in claim naming its keys (``KEYS``) and numbered like the records."""


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with running_redis() as running:
        yield running


def _combine(group: Any, items: list[Any], once: bool, bare: bool) -> ScriptCall:
    """Records coalesced into one script call: each item is ``(key, value)``."""
    return script_call(PUSH_EACH, tuple(k for k, _ in items), tuple(v for _, v in items))


class _Order:
    """Where each call ran in Redis (the execution number its reply carries)."""

    def __init__(self) -> None:
        self.ran: dict[str, int] = {}

    def record(self, batcher: RedisBatcher, key: str, name: str) -> None:
        def done(reply: Any) -> None:
            self.ran[name] = reply

        batcher.coalesced(_combine, "g", (key, name), (key,), done)

    def names(self) -> list[str]:
        """The calls in the order Redis ran them."""
        return sorted(self.ran, key=self.ran.__getitem__)


async def _claim(batcher: RedisBatcher, key: str, order: _Order, ahead: bool = True) -> None:
    """Queued now, in this tick behind what was queued before it (the await comes after)."""
    future = batcher.call_script(CLAIM, (key,), (), ahead=ahead)
    order.ran["claim"] = await future


async def _started(server: RedisServer) -> RedisBatcher:
    batcher = RedisBatcher(server.url)
    await batcher.start()
    return batcher


async def test_a_claim_goes_ahead_of_other_sessions_records(server: RedisServer) -> None:
    batcher = await _started(server)
    order = _Order()
    for n in range(3000):  # one tick: another client's fan-out to 3,000 sessions
        order.record(batcher, f"lane:queue:{n}", f"r{n}")
    await _claim(batcher, "lane:owner:probe", order)
    await batcher.flush()
    await batcher.close()
    assert order.names() == ["claim"] + [f"r{n}" for n in range(3000)]  # records in order


async def test_without_the_lane_a_claim_waits_behind_every_record(server: RedisServer) -> None:
    """The control: the same queue, the claim queued as a plain command."""
    batcher = await _started(server)
    order = _Order()
    for n in range(3000):
        order.record(batcher, f"lane2:queue:{n}", f"r{n}")
    await _claim(batcher, "lane2:owner:probe", order, ahead=False)
    await batcher.close()
    assert order.names() == [f"r{n}" for n in range(3000)] + ["claim"]


async def test_a_claim_stays_behind_a_record_of_its_own_keys(server: RedisServer) -> None:
    batcher = await _started(server)
    order = _Order()
    for n in range(3000):  # record 1500 writes a key the claim names (its session's queue)
        key = "lane3:queue:mine" if n == 1500 else f"lane3:queue:{n}"
        order.record(batcher, key, f"r{n}")
    await _claim(batcher, "lane3:queue:mine", order)
    await batcher.flush()
    await batcher.close()
    assert order.names().index("claim") == 1501  # right after it, ahead of the later ones


async def test_a_claim_never_goes_ahead_of_a_plain_command(server: RedisServer) -> None:
    batcher = await _started(server)
    order = _Order()
    for n in range(100):
        order.record(batcher, f"lane4:queue:{n}", f"r{n}")
    batcher.command("INCR", "lane:executed", callback=lambda n: order.ran.update(plain=n))
    for n in range(100, 200):
        order.record(batcher, f"lane4:queue:{n}", f"r{n}")
    await _claim(batcher, "lane4:owner:probe", order)
    await batcher.flush()
    await batcher.close()
    # the records coalesce into one call ahead of the command (they share no key with it);
    # the claim stays behind the command
    assert order.ran["claim"] > order.ran["plain"]


async def test_a_pipeline_carries_a_bounded_number_of_records(server: RedisServer) -> None:
    batcher = await _started(server)
    order = _Order()
    records = 3 * MAX_PIPELINE_ITEMS + 10
    for n in range(records):
        order.record(batcher, f"lane5:queue:{n % 50}", f"r{n}")
    await batcher.flush()
    sync = server.client()
    try:
        lengths = [sync.llen(f"lane5:queue:{k}") for k in range(50)]
    finally:
        sync.close()
    await batcher.close()
    assert order.names() == [f"r{n}" for n in range(records)]
    assert sum(lengths) == records
    assert batcher.pipelines == 4  # 3 full pipelines, then the last 10 records with the PING
