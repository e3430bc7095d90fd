"""The supervisor's HTTP endpoint: the pod's probes, answered for every worker.

With ``workers`` > 1 the supervisor serves ``metrics.port`` (the pod contract's health port,
the one the Kubernetes probes use) and worker ``w`` its own endpoint on ``metrics.port + 1 +
w``. Each probe of the supervisor asks every worker's own endpoint (concurrently, with a
timeout) and answers for all of them:

- ``/healthz`` is 200 while every worker is alive (its ``/healthz`` answers 200), starting
  (a fresh process whose endpoint has not answered yet, for ``START_GRACE_S``) or dead and
  due to be restarted by the supervisor (within its backoff); else 503, one line per failing
  worker naming it, its pid and why (``worker 1 (pid 4242): /healthz: no answer within 1.5s``).
- ``/readyz`` is 200 when every worker's ``/readyz`` is; the JSON body has one check per
  worker (``"worker 1": "pid 4242: cluster: cluster member offline (lease not held)"``).
- ``/metrics``: the supervisor's own (``xmq_worker_up``, ``xmq_worker_restarts_total`` per
  worker, process CPU and memory); each worker's metrics are on its own port.
- ``POST /admin/<action>`` is sent on to every running worker (``xmq drain --url``), once
  the supervisor's own ``AdminAccess`` let it through (the token, else loopback only); the
  supervisor presents the token to the workers itself.

The endpoint runs its own event loop in a thread: the supervisor's main loop stays the plain
blocking loop that reaps and restarts workers. It reads the ``Worker`` records that loop
updates (attribute reads; the only thing it writes is ``answered_pid``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from xmq.observability.admin_access import AdminAccess, AdminTokenError
from xmq.observability.http_endpoint import HttpResponse, ObservabilityEndpoint
from xmq.observability.readiness import LoopLagMonitor, ReadinessCheck, ReadinessChecks

if TYPE_CHECKING:
    from xmq.app.supervisor import Worker

log = logging.getLogger("xmq.app.supervisor")

PROBE_TIMEOUT_S = 1.5
"""How long a worker's endpoint may take to answer (below the pod probes' 2 s timeout)."""
START_GRACE_S = 60.0
"""A (re)started worker whose endpoint has not answered yet counts as alive this long."""
_ADMIN_TIMEOUT_S = 30.0
_MAX_RESPONSE_BYTES = 1024 * 1024


async def http_request(
    host: str,
    port: int,
    method: str,
    target: str,
    timeout_s: float = PROBE_TIMEOUT_S,
    authorization: str | None = None,
) -> tuple[int, bytes]:
    """One HTTP/1.1 request to a worker's endpoint (which closes after each answer)."""
    extra = f"Authorization: {authorization}\r\n" if authorization else ""
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(
                f"{method} {target} HTTP/1.1\r\nHost: {host}:{port}\r\n{extra}"
                "Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
            )
            await writer.drain()
            raw = await reader.read(_MAX_RESPONSE_BYTES)
            while chunk := await reader.read(_MAX_RESPONSE_BYTES):
                raw += chunk
        finally:
            writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise ConnectionError(f"not an HTTP answer: {raw[:60]!r}")
    return int(status_line[1]), body


def _why(error: BaseException, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    if isinstance(error, TimeoutError):
        return f"no answer within {timeout_s:g}s"
    return str(error) or type(error).__name__


async def _exits_soon(proc: subprocess.Popen[bytes], within_s: float = 0.2) -> bool:
    """Whether the process has exited or does so within ``within_s`` (a killed process
    resets its connections a moment before it can be reaped)."""
    deadline = time.monotonic() + within_s
    while proc.poll() is None:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.02)
    return True


class WorkerCollector(Collector):
    """``xmq_worker_up`` and ``xmq_worker_restarts_total`` for each worker."""

    def __init__(self, workers: Sequence[Worker]) -> None:
        self.workers = workers

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "xmq_worker_up", "1 while the worker process runs.", labels=["worker"]
        )
        restarts = CounterMetricFamily(
            "xmq_worker_restarts",
            "Worker processes that exited and were restarted.",
            labels=["worker"],
        )
        for worker in self.workers:
            label = [str(worker.index)]
            up.add_metric(label, 0.0 if worker.proc is None else 1.0)
            restarts.add_metric(label, float(len(worker.exit_codes)))
        yield up
        yield restarts


class SupervisorEndpoint(ObservabilityEndpoint):
    """The pod-level probes over every worker's own endpoint."""

    def __init__(
        self,
        workers: Sequence[Worker],
        worker_host: str,
        stopping: Callable[[], bool],
        admin: AdminAccess | None = None,
    ) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(WorkerCollector(workers))
        ProcessCollector(registry=registry)
        super().__init__(
            registry,
            ReadinessChecks(timeout_s=PROBE_TIMEOUT_S + 0.5),
            LoopLagMonitor(),
            admin=admin,
        )
        self.workers = workers
        self.worker_host = worker_host
        self.stopping = stopping
        self.readiness.add("supervisor", self._not_stopping)
        for worker in workers:
            self.readiness.add(f"worker {worker.index}", self._ready_check(worker))

    async def _not_stopping(self) -> str | None:
        return "stopping: every worker was told to stop" if self.stopping() else None

    def _ready_check(self, worker: Worker) -> ReadinessCheck:
        async def check() -> str | None:
            proc = worker.proc
            if proc is None:
                return self._not_running(worker)
            if proc.poll() is not None:
                return f"pid {proc.pid}: exited ({proc.returncode})"
            try:
                status, body = await http_request(
                    self.worker_host, worker.http_port, "GET", "/readyz"
                )
            except (OSError, TimeoutError) as error:
                return f"pid {proc.pid}: /readyz: {_why(error)}"
            self._answered(worker, proc.pid)
            if status == 200:
                return None
            try:
                checks = json.loads(body)["checks"]
                failing = "; ".join(f"{k}: {v}" for k, v in checks.items() if v != "ok")
            except (ValueError, KeyError, TypeError, AttributeError):
                failing = body.decode(errors="replace").strip()
            return f"pid {proc.pid}: {failing or f'/readyz answered {status}'}"

        return check

    def _not_running(self, worker: Worker) -> str:
        code = worker.exit_codes[-1] if worker.exit_codes else None
        restart_at = worker.restart_at
        if restart_at is not None and not self.stopping():
            delay = max(0.0, restart_at - time.monotonic())
            return f"not running (exit {code}): restarting in {delay:.1f}s"
        return f"not running (exit {code})"

    def _answered(self, worker: Worker, pid: int) -> None:
        if worker.proc is not None and worker.proc.pid == pid:
            worker.answered_pid = pid

    async def _liveness(self, worker: Worker) -> tuple[bool, str]:
        """(alive, what to say) for one worker."""
        name = f"worker {worker.index}"
        proc = worker.proc
        if proc is None:
            alive = worker.restart_at is not None or self.stopping()
            return alive, f"{name}: {self._not_running(worker)}"
        if proc.poll() is not None:  # died: the supervisor's loop restarts it (or is stopping)
            return True, f"{name} (pid {proc.pid}): exited ({proc.returncode})"
        try:
            status, body = await http_request(self.worker_host, worker.http_port, "GET", "/healthz")
        except (OSError, TimeoutError) as error:
            if await _exits_soon(proc):  # killed while answering (connection reset)
                return True, f"{name} (pid {proc.pid}): exited ({proc.returncode})"
            starting = worker.answered_pid != proc.pid
            if starting and time.monotonic() - worker.started_at < START_GRACE_S:
                return True, f"{name} (pid {proc.pid}): starting"
            return False, f"{name} (pid {proc.pid}): /healthz: {_why(error)}"
        self._answered(worker, proc.pid)
        text = body.decode(errors="replace").strip()
        return status == 200, f"{name} (pid {proc.pid}): {text or status}"

    async def respond(self, method: str, target: str) -> HttpResponse:
        path = target.partition("?")[0]
        if path == "/healthz" and method in ("GET", "HEAD"):
            results = await asyncio.gather(*(self._liveness(w) for w in self.workers))
            failing = [text for alive, text in results if not alive]
            if failing:
                return HttpResponse(503, "\n".join(failing).encode() + b"\n")
            lines = [f"ok workers={len(self.workers)}", *(text for _, text in results)]
            return HttpResponse(200, "\n".join(lines).encode() + b"\n")
        if path.startswith("/admin/"):
            if method != "POST":
                return HttpResponse(405, b"use POST\n")
            return await self._forward(method, target)
        return await super().respond(method, target)

    async def _forward(self, method: str, target: str) -> HttpResponse:
        """An admin action (already authorised), sent on to every running worker."""
        try:
            authorization = self.admin.header()
        except AdminTokenError as error:
            log.error("admin request not forwarded: metrics.admin_token_file: %s", error)
            return HttpResponse(503, b"admin token unavailable\n")

        async def one(worker: Worker) -> tuple[bool, str]:
            if worker.proc is None:
                return False, f"worker {worker.index}: not running"
            try:
                status, body = await http_request(
                    self.worker_host,
                    worker.http_port,
                    method,
                    target,
                    _ADMIN_TIMEOUT_S,
                    authorization,
                )
            except (OSError, TimeoutError) as error:
                return False, f"worker {worker.index}: {_why(error, _ADMIN_TIMEOUT_S)}"
            text = body.decode(errors="replace").strip()
            return 200 <= status < 300, f"worker {worker.index}: {text}"

        results = await asyncio.gather(*(one(worker) for worker in self.workers))
        body = "\n".join(text for _, text in results).encode() + b"\n"
        return HttpResponse(202 if all(ok for ok, _ in results) else 502, body)


class EndpointThread:
    """Runs an endpoint on an event loop of its own, in a daemon thread."""

    def __init__(self, endpoint: ObservabilityEndpoint, host: str, port: int) -> None:
        self.endpoint = endpoint
        self.host = host
        self.port = port
        self.bound: tuple[str, int] | None = None
        self._error: BaseException | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="xmq-supervisor-http", daemon=True)

    def start(self) -> tuple[str, int]:
        """Bind and serve; raise the bind error (``OSError``) if the port is taken."""
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error
        if self.bound is None:
            raise TimeoutError("the supervisor's HTTP endpoint did not start")
        return self.bound

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            self.bound = await self.endpoint.start(self.host, self.port)
        except OSError as error:
            self._error = error
            return
        finally:
            self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self.endpoint.stop()

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and self._thread.is_alive():
            loop.call_soon_threadsafe(stop.set)
            self._thread.join(5)
