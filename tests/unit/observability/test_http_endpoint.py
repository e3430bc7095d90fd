"""The HTTP endpoint over a real socket: routes, status codes, admin actions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

import pytest

from xmq.core.broker import Broker
from xmq.core.settings import CoreSettings
from xmq.observability.broker_metrics import BrokerCollector, build_registry
from xmq.observability.http_endpoint import ObservabilityEndpoint
from xmq.observability.readiness import LoopLagMonitor, ReadinessChecks


async def _request(port: int, method: str, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} {path} HTTP/1.1\r\nhost: test\r\n\r\n".encode())
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, body.decode()


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[ObservabilityEndpoint, int]]:
    lag = LoopLagMonitor()
    lag.start()
    broker = Broker(CoreSettings())
    collector = BrokerCollector(broker, lag.lag, [])
    server = ObservabilityEndpoint(build_registry(collector), ReadinessChecks(), lag)
    _host, port = await server.start("127.0.0.1", 0)
    yield server, port
    await server.stop()
    lag.stop()


async def test_metrics_and_health(endpoint: tuple[ObservabilityEndpoint, int]) -> None:
    _server, port = endpoint
    status, body = await _request(port, "GET", "/metrics")
    assert status == 200
    assert "xmq_clients_connected 0.0" in body
    status, body = await _request(port, "GET", "/healthz")
    assert (status, body.split()[0]) == (200, "ok")
    assert (await _request(port, "GET", "/nope"))[0] == 404


async def test_readyz_follows_the_checks(endpoint: tuple[ObservabilityEndpoint, int]) -> None:
    server, port = endpoint
    state: dict[str, str | None] = {"problem": None}

    async def dependency() -> str | None:
        return state["problem"]

    server.readiness.add("postgres", dependency)
    status, body = await _request(port, "GET", "/readyz")
    assert status == 200
    assert '"postgres": "ok"' in body
    state["problem"] = "connection refused"
    status, body = await _request(port, "GET", "/readyz")
    assert status == 503
    assert '"postgres": "connection refused"' in body


async def test_admin_actions_need_post(endpoint: tuple[ObservabilityEndpoint, int]) -> None:
    server, port = endpoint
    calls: list[Mapping[str, str]] = []

    async def drain(query: Mapping[str, str]) -> str:
        calls.append(query)
        return "draining"

    server.actions["drain"] = drain
    assert (await _request(port, "GET", "/admin/drain"))[0] == 405
    assert calls == []
    status, body = await _request(port, "POST", "/admin/drain?server_reference=b:1884")
    assert (status, body.strip()) == (202, "draining")
    assert calls == [{"server_reference": "b:1884"}]


async def test_garbage_request_does_not_hurt(endpoint: tuple[ObservabilityEndpoint, int]) -> None:
    _server, port = endpoint
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"\x00\x01 not http\r\n\r\n")
    await writer.drain()
    await reader.read()
    writer.close()
    assert (await _request(port, "GET", "/healthz"))[0] == 200
