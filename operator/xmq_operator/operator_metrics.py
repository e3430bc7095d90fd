"""The operator's own metrics and its HTTP endpoint (``/healthz`` and ``/metrics``).

- ``xmq_operator_reconciles_total{handler,result}``: handler runs (``result`` ok, retry: a
  roll step or a problem to re-check, error: an unexpected exception);
- ``xmq_operator_reconcile_duration_seconds{handler}``: how long they took;
- ``xmq_operator_leader``: 1 while this replica holds the leader Lease (or runs alone);
- per XmqCluster, from its status as the API server last reported it:
  ``xmq_operator_cluster_condition{namespace,cluster,condition}`` (1 when True),
  ``xmq_operator_cluster_replicas`` / ``..._ready_replicas`` / ``..._updated_replicas``.

``/healthz`` answers 200 while the process is healthy: a standby is healthy while it waits; the
leader while kopf's event loop has beaten within ``HEARTBEAT_STALE_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kopf
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from xmq_operator.spec import API_GROUP, API_VERSION, PLURAL

HEARTBEAT_INTERVAL_S = 5.0
HEARTBEAT_STALE_S = 60.0
CLUSTER_LABELS = ("namespace", "cluster")


class OperatorMetrics:
    """Every metric of one operator process, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.reconciles = Counter(
            "xmq_operator_reconciles",
            "Handler runs, by handler and result (ok, retry, error).",
            ["handler", "result"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "xmq_operator_reconcile_duration_seconds",
            "Duration of handler runs.",
            ["handler"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.leader = Gauge(
            "xmq_operator_leader",
            "1 while this replica is the one acting (holds the leader Lease).",
            registry=self.registry,
        )
        self.condition = Gauge(
            "xmq_operator_cluster_condition",
            "Status conditions of each XmqCluster (1 when True).",
            [*CLUSTER_LABELS, "condition"],
            registry=self.registry,
        )
        self.replicas = Gauge(
            "xmq_operator_cluster_replicas",
            "Broker pods of each XmqCluster (status.replicas).",
            CLUSTER_LABELS,
            registry=self.registry,
        )
        self.ready_replicas = Gauge(
            "xmq_operator_cluster_ready_replicas",
            "Ready broker pods of each XmqCluster.",
            CLUSTER_LABELS,
            registry=self.registry,
        )
        self.updated_replicas = Gauge(
            "xmq_operator_cluster_updated_replicas",
            "Broker pods running the current template, per XmqCluster.",
            CLUSTER_LABELS,
            registry=self.registry,
        )
        self._conditions: dict[tuple[str, str], set[str]] = {}
        self.heartbeat: float | None = None
        self.acting = False

    @contextmanager
    def run(self, handler: str) -> Iterator[None]:
        """Count and time one handler run; its result follows from how it ends."""
        started = time.perf_counter()
        result = "error"
        try:
            yield
            result = "ok"
        except kopf.TemporaryError:
            result = "retry"
            raise
        finally:
            self.duration.labels(handler).observe(time.perf_counter() - started)
            self.reconciles.labels(handler, result).inc()

    def set_leader(self, acting: bool) -> None:
        self.acting = acting
        self.leader.set(1 if acting else 0)

    def cluster_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Record the state of one XmqCluster from its ``status``."""
        labels = (namespace, name)
        self.replicas.labels(*labels).set(int(status.get("replicas") or 0))
        self.ready_replicas.labels(*labels).set(int(status.get("readyReplicas") or 0))
        self.updated_replicas.labels(*labels).set(int(status.get("updatedReplicas") or 0))
        seen: set[str] = set()
        for item in status.get("conditions") or []:
            kind = str(item.get("type") or "")
            if kind:
                seen.add(kind)
                value = 1 if item.get("status") == "True" else 0
                self.condition.labels(*labels, kind).set(value)
        for gone in self._conditions.get(labels, set()) - seen:
            self.condition.remove(*labels, gone)
        self._conditions[labels] = seen

    def cluster_deleted(self, namespace: str, name: str) -> None:
        labels = (namespace, name)
        if labels not in self._conditions:
            return
        for gauge in (self.replicas, self.ready_replicas, self.updated_replicas):
            gauge.remove(*labels)
        for kind in self._conditions.pop(labels):
            self.condition.remove(*labels, kind)

    def healthy(self, now: float) -> tuple[bool, str]:
        """(healthy, why) for ``/healthz``."""
        if not self.acting:
            return True, "standby"
        if self.heartbeat is None or now - self.heartbeat > HEARTBEAT_STALE_S:
            return False, "the operator's event loop has not run lately"
        return True, "leader"


METRICS = OperatorMetrics()
"""The process's metrics (kopf handlers are module-level functions, so is this)."""
_HEARTBEAT: list[asyncio.Task[None]] = []


@kopf.on.startup()
async def start_heartbeat(**_: Any) -> None:
    """Beat in kopf's event loop, so ``/healthz`` notices a wedged loop."""

    async def beat() -> None:
        while True:
            METRICS.heartbeat = time.monotonic()
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)

    METRICS.heartbeat = time.monotonic()
    _HEARTBEAT.append(asyncio.get_running_loop().create_task(beat(), name="xmq-heartbeat"))


@kopf.on.cleanup()
async def stop_heartbeat(**_: Any) -> None:
    while _HEARTBEAT:
        task = _HEARTBEAT.pop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@kopf.on.event(API_GROUP, API_VERSION, PLURAL)
def cluster_event(event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
    """Per-cluster gauges follow every change of an XmqCluster (its status included)."""
    metadata = body.get("metadata") or {}
    namespace, name = str(metadata.get("namespace")), str(metadata.get("name"))
    if event.get("type") == "DELETED":
        METRICS.cluster_deleted(namespace, name)
    else:
        METRICS.cluster_status(namespace, name, body.get("status") or {})


class _Handler(BaseHTTPRequestHandler):
    metrics: OperatorMetrics
    health_path: str

    def do_GET(self) -> None:  # noqa: N802  (the http.server interface)
        path = self.path.split("?", 1)[0]
        if path == self.health_path:
            ok, why = self.metrics.healthy(time.monotonic())
            self._answer(200 if ok else 503, "text/plain", f"{why}\n".encode())
        elif path == "/metrics":
            self._answer(200, CONTENT_TYPE_LATEST, generate_latest(self.metrics.registry))
        else:
            self._answer(404, "text/plain", b"not found\n")

    def _answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return


class OperatorEndpoint:
    """``/healthz`` (at ``health_path``) and ``/metrics`` on one port, in a thread."""

    def __init__(self, metrics: OperatorMetrics, host: str, port: int, health_path: str) -> None:
        handler = type("Handler", (_Handler,), {"metrics": metrics, "health_path": health_path})
        self.server = ThreadingHTTPServer((host, port), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="xmq-operator-http", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
