"""``xmq serve`` with ``workers`` > 1: one supervisor process, N broker node processes.

The supervisor runs no broker. It starts each worker as a fresh interpreter running the same
``xmq serve`` (same config file and environment, plus ``XMQ_WORKER_INDEX``), forwards SIGTERM
and SIGINT (each worker drains as a single node does) and SIGHUP (reload), restarts a worker
that dies while it is not stopping (backoff 0.5 s doubling to 30 s, reset after a minute of
uptime) and exits when every worker has exited. A listener configured with port 0 is resolved
here first, so all workers share one port. Workers stop when the supervisor dies, even by
SIGKILL (``PR_SET_PDEATHSIG`` on Linux, else a check of the parent pid every second).

With ``metrics.enabled`` the supervisor serves the pod's probes on ``metrics.port`` itself,
answering for every worker (``xmq.app.supervisor_health``); worker ``w`` serves its own
endpoint on ``metrics.port + 1 + w`` (with port 0, on a free port the supervisor picks and
passes in ``XMQ_WORKER_HTTP_PORT``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from types import FrameType

from xmq.app.supervisor_health import EndpointThread, SupervisorEndpoint
from xmq.app.worker_plan import (
    SUPERVISOR_PID_ENV,
    WORKER_HTTP_PORT_ENV,
    WORKER_INDEX_ENV,
    worker_http_port,
)
from xmq.config import BrokerConfig, ListenerConfig
from xmq.contract.pod import POD_UID_ENV
from xmq.observability.admin_access import AdminAccess

log = logging.getLogger("xmq.app.supervisor")

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
STABLE_AFTER_S = 60.0
"""A worker that ran this long before dying is restarted after the first backoff again."""
KILL_MARGIN_S = 15.0
"""After SIGTERM, workers get shutdown.grace_s plus this before they are killed."""
_PR_SET_PDEATHSIG = 1
CONFIG_ERROR_EXIT = 2
"""``xmq serve``'s exit code for a refused configuration: restarting would not help."""


@dataclass(slots=True)
class Worker:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    failures: int = 0
    restart_at: float | None = None
    exit_codes: list[int] = field(default_factory=list)
    http_port: int = 0
    """Its own HTTP endpoint's port (what the supervisor's probes ask)."""
    answered_pid: int | None = None
    """The pid whose endpoint last answered the supervisor (a fresh process has not yet)."""


def reserve_ports(
    listeners: tuple[ListenerConfig, ...],
) -> tuple[tuple[ListenerConfig, ...], list[socket.socket]]:
    """Give every port-0 listener a concrete free port, held open with ``SO_REUSEPORT``.

    The held sockets are bound but never listen, so they take no connections; they keep the
    port for the workers (and for a restarted worker) as long as the supervisor lives.
    """
    resolved: list[ListenerConfig] = []
    held: list[socket.socket] = []
    for spec in listeners:
        if spec.port != 0:
            resolved.append(spec)
            continue
        family, kind, proto, _, address = socket.getaddrinfo(
            spec.host, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        held.append(sock)
        resolved.append(spec.model_copy(update={"port": sock.getsockname()[1]}))
    return tuple(resolved), held


class Supervisor:
    """Starts, watches, signals and restarts the worker processes."""

    def __init__(self, config: BrokerConfig, config_path: str | None, count: int) -> None:
        self.config = config
        self.config_path = config_path
        self.workers = [Worker(index) for index in range(count)]
        self.stopping = False
        self._stop_deadline = 0.0
        self._pending: list[int] = []
        self._env: dict[str, str] = {}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._pending.append(signum)

    def _command(self) -> list[str]:
        command = [sys.executable, "-m", "xmq", "serve"]
        if self.config_path is not None:
            command += ["--config", self.config_path]
        return command

    def _start(self, worker: Worker) -> None:
        env = dict(self._env, **{WORKER_INDEX_ENV: str(worker.index)})
        if self.config.metrics.enabled:
            env[WORKER_HTTP_PORT_ENV] = str(worker.http_port)
        worker.proc = subprocess.Popen(self._command(), env=env)
        worker.started_at = time.monotonic()
        worker.restart_at = None
        log.info("worker %d started (pid %d)", worker.index, worker.proc.pid)

    def _start_endpoint(self) -> EndpointThread | None:
        """Serve the pod's probes on ``metrics.port`` (they ask every worker's own port)."""
        metrics = self.config.metrics
        if not metrics.enabled:
            return None
        for worker in self.workers:
            worker.http_port = worker_http_port(self.config, worker.index) or _free_port(
                metrics.host
            )
        endpoint = SupervisorEndpoint(
            self.workers,
            _local_address(metrics.host),
            lambda: self.stopping,
            AdminAccess(metrics.admin_token_file),
        )
        thread = EndpointThread(endpoint, metrics.host, metrics.port)
        thread.start()
        return thread

    def _signal_all(self, signum: int) -> None:
        for worker in self.workers:
            if worker.proc is not None and worker.proc.poll() is None:
                worker.proc.send_signal(signum)

    def _handle_signals(self) -> None:
        pending, self._pending = self._pending, []
        for signum in pending:
            if signum == signal.SIGHUP:
                log.info("SIGHUP: reloading %d workers", len(self.workers))
                self._signal_all(signal.SIGHUP)
            elif not self.stopping:
                log.info("%s: stopping %d workers", signal.Signals(signum).name, len(self.workers))
                self.stopping = True
                self._stop_deadline = (
                    time.monotonic() + self.config.shutdown.grace_s + KILL_MARGIN_S
                )
                self._signal_all(signal.SIGTERM)

    def _reap(self, now: float) -> None:
        for worker in self.workers:
            proc = worker.proc
            if proc is None or proc.poll() is None:
                continue
            code = proc.returncode
            worker.exit_codes.append(code)
            worker.proc = None
            if self.stopping:
                log.info("worker %d exited (%d)", worker.index, code)
                continue
            if code == CONFIG_ERROR_EXIT:
                log.error("worker %d refused its configuration: stopping", worker.index)
                self._pending.append(signal.SIGTERM)
                continue
            uptime = now - worker.started_at
            worker.failures = 1 if uptime >= STABLE_AFTER_S else worker.failures + 1
            delay = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (worker.failures - 1))
            worker.restart_at = now + delay
            log.error(
                "worker %d (pid %d) died unexpectedly (exit %d after %.1f s): restarting in %.1f s",
                worker.index,
                proc.pid,
                code,
                uptime,
                delay,
            )

    def run(self) -> int:
        """Run until every worker has exited after a stop signal; return the exit code."""
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        listeners, held = reserve_ports(self.config.listeners)
        listeners_json = "[" + ",".join(s.model_dump_json() for s in listeners) + "]"
        self._env = dict(os.environ)
        self._env["XMQ_LISTENERS"] = listeners_json
        self._env[SUPERVISOR_PID_ENV] = str(os.getpid())
        self._env.setdefault(POD_UID_ENV, f"local-{os.getpid()}-{int(time.time())}")
        try:
            endpoint = self._start_endpoint()
        except OSError as error:
            log.error(
                "cannot serve the probes on metrics.port %d: %s", self.config.metrics.port, error
            )
            for sock in held:
                sock.close()
            return 1
        bound = endpoint.bound if endpoint is not None else None
        health = f" health {bound[0]}:{bound[1]}" if bound is not None else ""
        print(f"xmq: supervisor pid {os.getpid()} workers {len(self.workers)}{health}", flush=True)
        try:
            for worker in self.workers:
                self._start(worker)
            while True:
                self._handle_signals()
                now = time.monotonic()
                self._reap(now)
                if self.stopping:
                    if all(worker.proc is None for worker in self.workers):
                        break
                    if now > self._stop_deadline:
                        log.error("workers still running after the grace period: killed")
                        self._signal_all(signal.SIGKILL)
                else:
                    for worker in self.workers:
                        if worker.restart_at is not None and now >= worker.restart_at:
                            self._start(worker)
                time.sleep(0.1)
        finally:
            self._signal_all(signal.SIGKILL)  # only reached with workers alive on an error
            if endpoint is not None:
                endpoint.stop()
            for sock in held:
                sock.close()
        failed = [w.index for w in self.workers if w.exit_codes and w.exit_codes[-1] != 0]
        return 1 if failed else 0


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _local_address(host: str) -> str:
    """Where the supervisor reaches an endpoint bound to ``host``."""
    return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


def follow_supervisor() -> int | None:
    """In a worker: die with the supervisor. Returns the supervisor's pid to watch, if any.

    On Linux the kernel sends SIGTERM when the parent dies (the worker drains as usual); the
    caller also checks ``os.getppid()`` periodically (other systems, and a parent that died
    before ``prctl`` ran).
    """
    value = os.environ.get(SUPERVISOR_PID_ENV)
    if not value:
        return None
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError) as error:
            log.warning("prctl(PR_SET_PDEATHSIG) unavailable: %s", error)
    return int(value)
