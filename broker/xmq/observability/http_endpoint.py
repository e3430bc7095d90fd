"""The node's HTTP endpoint (its own port): ``/metrics``, ``/healthz``, ``/readyz``, admin.

HTTP/1.1 is parsed with ``h11``; every response closes the connection (Prometheus and
Kubernetes probes open one connection per request anyway). Admin actions (``POST
/admin/<name>``) are callables the composition root registers; ``AdminAccess`` decides who
may call them (a bearer token, else loopback only) before any of them runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import parse_qsl, urlsplit

import h11
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from xmq.observability.admin_access import AdminAccess
from xmq.observability.readiness import LoopLagMonitor, ReadinessChecks

log = logging.getLogger("xmq.observability")

AdminAction = Callable[[Mapping[str, str]], Awaitable[str]]
"""An admin action: gets the query parameters, returns a short text answer."""

_MAX_REQUEST_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


class ObservabilityEndpoint:
    """Serves metrics, probes and admin actions for one broker node."""

    def __init__(
        self,
        registry: CollectorRegistry,
        readiness: ReadinessChecks,
        loop_lag: LoopLagMonitor,
        max_loop_lag_s: float = 5.0,
        admin: AdminAccess | None = None,
    ) -> None:
        self.registry = registry
        self.admin = admin if admin is not None else AdminAccess()
        self.readiness = readiness
        self.loop_lag = loop_lag
        self.max_loop_lag_s = max_loop_lag_s
        self.actions: dict[str, AdminAction] = {}
        self._server: asyncio.Server | None = None
        self.bound: tuple[str, int] | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self._server = await asyncio.start_server(
            self._serve, host=host, port=port, reuse_address=True
        )
        for sock in self._server.sockets:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                bound_host, bound_port = sock.getsockname()[:2]
                self.bound = (bound_host, bound_port)
                break
        assert self.bound is not None
        return self.bound

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_REQUEST_BYTES)
        try:
            request = await _read_request(connection, reader)
            if request is None:
                return
            method, target, authorization = request
            peer = writer.get_extra_info("peername")
            refusal = None
            if urlsplit(target).path.startswith("/admin/"):
                refusal = self.admin.refusal(authorization, str(peer[0]) if peer else None)
            if refusal is None:
                response = await self.respond(method, target)
            else:
                response = HttpResponse(refusal.status, refusal.reason.encode() + b"\n")
            headers = [
                ("content-type", response.content_type),
                ("content-length", str(len(response.body))),
                ("connection", "close"),
            ]
            if response.status == 401:
                headers.append(("www-authenticate", 'Bearer realm="xmq admin"'))
            head = h11.Response(
                status_code=response.status,
                headers=headers,
                reason=HTTPStatus(response.status).phrase,
            )
            writer.write(connection.send(head))
            writer.write(connection.send(h11.Data(data=response.body)))
            writer.write(connection.send(h11.EndOfMessage()))
            await writer.drain()
        except (h11.RemoteProtocolError, ConnectionError, TimeoutError) as error:
            log.debug("http endpoint: %s", error)
        finally:
            writer.close()

    async def respond(self, method: str, target: str) -> HttpResponse:
        """Route one request (public for tests)."""
        parts = urlsplit(target)
        path = parts.path
        query = dict(parse_qsl(parts.query))
        if path == "/metrics" and method in ("GET", "HEAD"):
            return HttpResponse(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
        if path == "/healthz" and method in ("GET", "HEAD"):
            lag = self.loop_lag.lag()
            if self.loop_lag.healthy(self.max_loop_lag_s):
                return HttpResponse(200, f"ok loop_lag_s={lag:.4f}\n".encode())
            return HttpResponse(503, f"event loop lag {lag:.3f}s\n".encode())
        if path == "/readyz" and method in ("GET", "HEAD"):
            results = await self.readiness.run()
            ready = all(result.problem is None for result in results)
            body = {
                "ready": ready,
                "checks": {result.name: result.problem or "ok" for result in results},
            }
            return HttpResponse(
                200 if ready else 503, json.dumps(body).encode() + b"\n", "application/json"
            )
        # Admin paths reach this point only past ``self.admin`` (see ``_serve``).
        action = self.actions.get(path.removeprefix("/admin/").strip("/"))
        if action is not None and path.startswith("/admin/"):
            if method != "POST":
                return HttpResponse(405, b"use POST\n")
            answer = await action(query)
            return HttpResponse(202, answer.encode() + b"\n")
        return HttpResponse(404, b"not found\n")


async def _read_request(
    connection: h11.Connection, reader: asyncio.StreamReader
) -> tuple[str, str, bytes | None] | None:
    """Read one request; return (method, target, Authorization header) or ``None`` if the
    peer went away."""
    request: h11.Request | None = None
    async with asyncio.timeout(10):
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(8192)
                connection.receive_data(data)
                if not data and request is None:
                    return None
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                authorization = next(
                    (value for name, value in request.headers if name == b"authorization"), None
                )
                return request.method.decode(), request.target.decode(), authorization
            elif isinstance(event, h11.ConnectionClosed):
                return None
