"""bench/durable_store_bench.py measures the real store against a real Redis: a short run of
each level writes and then removes every record it reports."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from bench.durable_store_bench import KEYS, run_level
from tests.support.redis_server import RedisServer, running_redis

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with running_redis() as running:
        yield running


@pytest.mark.parametrize("concurrency", [pytest.param(1, id="one"), pytest.param(20, id="many")])
async def test_a_level_reports_records_and_leaves_no_queue(
    server: RedisServer, concurrency: int
) -> None:
    line = await run_level(server.url, concurrency, 0.3)
    match = re.search(r"([\d,]+) records/s\s+([\d.]+) records/pipeline", line)
    assert match is not None, line
    assert int(match.group(1).replace(",", "")) > 0
    per_pipeline = float(match.group(2))
    if concurrency == 1:
        assert per_pipeline <= 1.05  # one record (and the previous one's removal) a round trip
    else:
        assert per_pipeline > 2  # the publishers' records share round trips
    client = server.client()
    try:
        for n in range(concurrency):  # every record was acknowledged (removed)
            assert client.llen(KEYS.session_queue(f"durable-{n}")) == 0
    finally:
        client.close()
