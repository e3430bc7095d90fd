"""The supervisor's probes over real worker endpoints (``ObservabilityEndpoint``) and processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from xmq.app.supervisor import Worker
from xmq.app.supervisor_health import SupervisorEndpoint
from xmq.observability.http_endpoint import ObservabilityEndpoint
from xmq.observability.readiness import LoopLagMonitor, ReadinessChecks

# Real worker processes (killed, reaped, their pids reported) and real HTTP endpoints the
# supervisor probes over sockets: the OS's processes and sockets, not a virtual clock.
pytestmark = pytest.mark.integration


class FakeWorker:
    """A sleeping process standing for a worker, with a real node HTTP endpoint."""

    def __init__(self, index: int) -> None:
        self.endpoint = ObservabilityEndpoint(
            CollectorRegistry(), ReadinessChecks(), LoopLagMonitor()
        )
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        self.worker = Worker(index, proc=proc, started_at=time.monotonic())

    async def start(self) -> None:
        self.endpoint.loop_lag.start()
        self.worker.http_port = (await self.endpoint.start("127.0.0.1", 0))[1]

    async def stop(self) -> None:
        self.endpoint.loop_lag.stop()
        await self.endpoint.stop()
        if self.worker.proc is not None:
            self.worker.proc.kill()
            self.worker.proc.wait()


@pytest.fixture
async def fakes() -> AsyncIterator[list[FakeWorker]]:
    workers = [FakeWorker(0), FakeWorker(1)]
    for fake in workers:
        await fake.start()
    try:
        yield workers
    finally:
        for fake in workers:
            await fake.stop()


async def _probe(endpoint: SupervisorEndpoint, path: str) -> tuple[int, str]:
    response = await endpoint.respond("GET", path)
    return response.status, response.body.decode()


async def test_ready_and_alive_only_when_every_worker_is(fakes: list[FakeWorker]) -> None:
    endpoint = SupervisorEndpoint([f.worker for f in fakes], "127.0.0.1", lambda: False)
    status, body = await _probe(endpoint, "/readyz")
    assert status == 200, body
    assert json.loads(body)["checks"] == {"supervisor": "ok", "worker 0": "ok", "worker 1": "ok"}
    status, body = await _probe(endpoint, "/healthz")
    assert status == 200 and body.startswith("ok workers=2\n"), body

    async def offline() -> str:
        return "cluster member offline (lease not held)"

    fakes[1].endpoint.readiness.add("cluster", offline)
    pid = fakes[1].worker.proc.pid if fakes[1].worker.proc else 0
    status, body = await _probe(endpoint, "/readyz")
    assert status == 503
    assert json.loads(body)["checks"]["worker 1"] == (
        f"pid {pid}: cluster: cluster member offline (lease not held)"
    )
    assert (await _probe(endpoint, "/healthz"))[0] == 200  # not ready is still alive


async def test_a_silent_worker_is_alive_only_while_starting(fakes: list[FakeWorker]) -> None:
    endpoint = SupervisorEndpoint([f.worker for f in fakes], "127.0.0.1", lambda: False)
    worker = fakes[1].worker
    assert worker.proc is not None
    pid = worker.proc.pid
    await fakes[1].endpoint.stop()  # its endpoint is gone, the process still runs
    status, body = await _probe(endpoint, "/healthz")
    assert status == 200 and f"worker 1 (pid {pid}): starting" in body, body
    worker.answered_pid = pid  # it had answered before: now it is wedged or broken
    status, body = await _probe(endpoint, "/healthz")
    assert status == 503
    assert body.startswith(f"worker 1 (pid {pid}): /healthz: "), body
    assert "worker 0" not in body
    worker.answered_pid, worker.started_at = None, time.monotonic() - 61  # never answered
    assert (await _probe(endpoint, "/healthz"))[0] == 503


async def test_a_dead_worker_due_for_restart_keeps_the_pod_alive_not_ready(
    fakes: list[FakeWorker],
) -> None:
    stopping = False
    endpoint = SupervisorEndpoint([f.worker for f in fakes], "127.0.0.1", lambda: stopping)
    worker = fakes[1].worker
    assert worker.proc is not None
    worker.proc.kill()
    worker.proc.wait()
    await fakes[1].endpoint.stop()
    status, body = await _probe(endpoint, "/healthz")  # exited, not reaped by the loop yet
    assert status == 200 and "worker 1" in body and "exited (-9)" in body, body
    worker.proc, worker.exit_codes, worker.restart_at = None, [-9], time.monotonic() + 2
    status, body = await _probe(endpoint, "/healthz")
    assert status == 200 and "worker 1: not running (exit -9): restarting in" in body, body
    status, body = await _probe(endpoint, "/readyz")
    assert status == 503
    assert json.loads(body)["checks"]["worker 1"].startswith("not running (exit -9): restarting")
    worker.restart_at = None  # not coming back (refused its configuration)
    assert (await _probe(endpoint, "/healthz"))[0] == 503
    stopping = True
    status, body = await _probe(endpoint, "/readyz")
    assert status == 503 and json.loads(body)["checks"]["supervisor"].startswith("stopping")
    assert (await _probe(endpoint, "/healthz"))[0] == 200
