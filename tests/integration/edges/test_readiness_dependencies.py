"""/readyz follows real dependencies: PostgreSQL stopped and Redis frozen, then back."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.http_probe import http, wait_port
from tests.support.postgres import PostgresServer
from tests.support.redis_server import running_redis

pytestmark = pytest.mark.integration

StartBroker = Callable[..., BrokerProcess]


def _checks(port: int) -> tuple[int, dict[str, str]]:
    status, body = http(port, "/readyz")
    return status, json.loads(body)["checks"]


def _wait_ready(port: int, expected: int, timeout: float = 20.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        status, checks = _checks(port)
        if status == expected:
            return checks
        assert time.monotonic() < deadline, f"/readyz stayed {status}: {checks}"
        time.sleep(0.2)


@pytest.fixture
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer.create()
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


def test_readyz_follows_postgresql(start_broker: StartBroker, postgres: PostgresServer) -> None:
    broker = start_broker(f"auth: {{postgres_dsn: '{postgres.dsn()}', migrate_on_start: true}}\n")
    port = wait_port(broker, "metrics")
    checks = _wait_ready(port, 200)
    assert checks["postgresql"] == "ok"
    postgres.stop("immediate")
    checks = _wait_ready(port, 503)
    assert checks["postgresql"] == "postgresql unreachable"
    assert checks["listening"] == "ok"
    assert http(port, "/healthz")[0] == 200  # alive, just not ready
    postgres.start()
    assert _wait_ready(port, 200)["postgresql"] == "ok"


def test_readyz_follows_redis_and_membership(start_broker: StartBroker, uid: str) -> None:
    with running_redis() as redis:
        broker = start_broker(
            "cluster:\n"
            f"  redis_url: {redis.url}\n"
            f"  name: ready-{uid}\n"
            "  lease_ttl_s: 1.0\n"
            "  link_host: 127.0.0.1\n"
            "  link_port: 0\n"
        )
        port = wait_port(broker, "metrics")
        assert _wait_ready(port, 200)["cluster"] == "ok"
        redis.pause()
        try:
            checks = _wait_ready(port, 503)
            assert checks["cluster"] != "ok"
            assert http(port, "/healthz")[0] == 200
        finally:
            redis.resume()
        assert _wait_ready(port, 200)["cluster"] == "ok"
