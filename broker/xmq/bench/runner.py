"""Runs one scenario plan against one broker: workers, start barrier, sampling, drain, results.

The runner itself does no I/O with the broker. It spawns the worker processes, waits until all
are connected (Ready), picks a common start t0 on the monotonic clock (system-wide on Linux, so
payload timestamps compare across processes), samples the broker PIDs at every interval
boundary, ends publishing after the planned count, drains until every expected delivery has
arrived (or ``drain_s`` passes), then collects the final reports and does the accounting.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import resource
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from time import monotonic_ns
from typing import Protocol

from xmq.bench.accounting import TrackerSnapshot, account
from xmq.bench.broker_probe import BrokerProbe
from xmq.bench.plan import FinalReport, IntervalReport, Ready, Start, Stop, WorkerFailed
from xmq.bench.redis_probe import RedisProbe, command_delta
from xmq.bench.results import (
    IntervalAggregator,
    IntervalPoint,
    RunResult,
    client_flags,
    summarize_connections,
    summarize_messages,
)
from xmq.bench.scenarios import CONNECTIONS, CommonOptions, ScenarioPlan
from xmq.bench.worker import worker_main

Progress = Callable[[str, IntervalPoint], None]


class MeasureWindow(Protocol):
    """Told when the measured part of a run begins and ends (e.g. to start and stop a tracer
    on the broker): ``opened`` once every client is connected and subscribed, before the
    start; ``closed`` once every expected delivery has arrived, before the clients stop."""

    def opened(self) -> None: ...

    def closed(self) -> None: ...


_START_LEAD_S = 0.5
_FD_MARGIN = 200


class BenchError(RuntimeError):
    """The run could not be carried out (workers failed, nobody connected, ...)."""


class _Workers:
    """The worker processes, a command pipe to each and a report pipe from each."""

    def __init__(self, plan: ScenarioPlan) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipes: list[Connection] = []
        self.commands: list[Connection] = []
        self.processes: list[BaseProcess] = []
        for worker_plan in plan.workers:
            command_in, command_out = context.Pipe(duplex=False)
            report_in, report_out = context.Pipe(duplex=False)
            process = context.Process(
                target=worker_main,
                args=(worker_plan, command_in, report_out),
                name=f"xmq-bench-worker-{worker_plan.worker_index}",
                daemon=True,
            )
            process.start()
            command_in.close()
            report_out.close()
            self.commands.append(command_out)
            self.pipes.append(report_in)
            self.processes.append(process)

    def broadcast(self, message: Start | Stop) -> None:
        for pipe in self.commands:
            with contextlib.suppress(OSError):
                pipe.send(message)

    def receive(self, timeout_s: float) -> list[object]:
        messages: list[object] = []
        for ready in wait(self.pipes, timeout=max(0.0, timeout_s)):
            assert isinstance(ready, Connection)
            try:
                messages.append(ready.recv())
            except (EOFError, OSError):
                self.pipes.remove(ready)
        return messages

    def close(self) -> None:
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
        for pipe in self.pipes + self.commands:
            pipe.close()


def run_plan(
    plan: ScenarioPlan,
    options: CommonOptions,
    *,
    label: str,
    broker_pids: tuple[int, ...] = (),
    progress: Progress | None = None,
    setup_timeout_s: float | None = None,
    window: MeasureWindow | None = None,
) -> RunResult:
    _check_file_limit(plan)
    probe = BrokerProbe(broker_pids)
    redis_probe = RedisProbe(options.redis_url) if options.redis_url else None
    aggregator = IntervalAggregator(options.interval_s, len(plan.workers))
    connect_count = sum(len(w.subscribers) + len(w.publishers) for w in plan.workers)
    if setup_timeout_s is None:
        setup_timeout_s = 30.0 + 2 * connect_count / max(options.setup_connect_rate, 1.0)
    samplers = _Samplers(probe, redis_probe, aggregator)
    workers = _Workers(plan)
    try:
        ready = _await_ready(workers, len(plan.workers), setup_timeout_s)
        connected = sum(r.connect.connected for r in ready)
        failed = sum(r.connect.failed + r.connect.refused for r in ready)
        first_error = next((r.connect.first_error for r in ready if r.connect.first_error), "")
        if connect_count and connected == 0:
            raise BenchError(f"no client could connect to {label}: {first_error}")
        if window is not None:
            window.opened()
        t0 = monotonic_ns() + int(_START_LEAD_S * 1e9)
        _sleep_until(t0 - int(0.05 * 1e9))
        workers.broadcast(Start(t0))
        finals = _measure(plan, options, workers, aggregator, samplers, t0, label, progress, window)
    finally:
        workers.close()
        if redis_probe is not None:
            redis_probe.close()
    if plan.kind == CONNECTIONS:
        clients = int(str(plan.params["clients"]))
        points, summary = summarize_connections(
            aggregator,
            target_rate=plan.offered_rate,
            clients=clients,
            connect_duration_s=plan.publish_duration_s,
            connect_span_s=max((f.last_connect_s for f in finals), default=0.0),
        )
        delivery = None
    else:
        points, summary = summarize_messages(
            aggregator,
            offered_rate=plan.offered_rate,
            warmup_s=options.warmup_s,
            publish_duration_s=plan.publish_duration_s,
        )
        sent: dict[int, int] = {}
        received: dict[tuple[int, int], list[TrackerSnapshot]] = {}
        for final in finals:
            sent.update(final.sent)
            for key, snapshot in final.trackers.items():
                received.setdefault(key, []).append(snapshot)
        delivery = account(plan.expectations, sent, received)
    flags = client_flags(summary, points)
    if failed:
        flags.append(
            f"setup: {failed} of {connect_count} clients failed to connect ({first_error})"
        )
    if delivery is not None and delivery.lost:
        flags.append(
            f"missing: {delivery.lost} of {delivery.expected} deliveries not received "
            "by the end of the drain"
        )
    return RunResult(
        label=label,
        scenario=plan.name,
        kind=plan.kind,
        description=plan.description,
        params=dict(plan.params),
        intervals=points,
        summary=summary,
        account=delivery,
        setup_connected=connected,
        setup_failed=failed,
        setup_error=first_error,
        flags=flags,
        broker_pids=list(broker_pids),
        redis_commands=samplers.commands,
    )


def _check_file_limit(plan: ScenarioPlan) -> None:
    """Each worker holds its clients' sockets: refuse a plan that cannot fit its fd limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = hard if hard != resource.RLIM_INFINITY else soft
    for worker in plan.workers:
        sockets = len(worker.subscribers) + len(worker.publishers) + len(worker.idle_clients)
        if sockets > limit - _FD_MARGIN:
            raise BenchError(
                f"worker {worker.worker_index} would hold {sockets} sockets but the open-file "
                f"limit is {limit}: use more --workers"
            )


def _sleep_until(deadline_ns: int) -> None:
    delay = (deadline_ns - monotonic_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)


def _await_ready(workers: _Workers, count: int, timeout_s: float) -> list[Ready]:
    deadline = time.monotonic() + timeout_s
    ready: list[Ready] = []
    while len(ready) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BenchError(f"only {len(ready)} of {count} workers ready after {timeout_s:.0f} s")
        if not workers.pipes:
            raise BenchError("every worker exited during setup")
        for message in workers.receive(min(remaining, 1.0)):
            if isinstance(message, WorkerFailed):
                raise BenchError(f"worker {message.worker_index} failed: {message.error}")
            if isinstance(message, Ready):
                ready.append(message)
    return ready


def _measure(
    plan: ScenarioPlan,
    options: CommonOptions,
    workers: _Workers,
    aggregator: IntervalAggregator,
    samplers: _Samplers,
    t0: int,
    label: str,
    progress: Progress | None,
    window: MeasureWindow | None = None,
) -> list[FinalReport]:
    interval_ns = int(options.interval_s * 1e9)
    if plan.kind == CONNECTIONS:
        busy_s = plan.publish_duration_s + plan.hold_s
        drain_s = 0.0
    else:
        busy_s = plan.publish_duration_s
        drain_s = options.drain_s
    busy_end = t0 + int(busy_s * 1e9)
    hard_end = busy_end + int(drain_s * 1e9)
    boundary = 0
    shown = -1
    samplers.sample(0)
    while True:
        now = monotonic_ns()
        while now >= t0 + (boundary + 1) * interval_ns:
            boundary += 1
            samplers.sample(boundary)
            now = monotonic_ns()
        if now >= busy_end and (
            plan.kind == CONNECTIONS or now >= hard_end or _drained(plan, aggregator)
        ):
            # Stop at the next boundary so the last interval is whole and sampled.
            _sleep_until(t0 + (boundary + 1) * interval_ns + int(0.02 * 1e9))
            samplers.sample(boundary + 1, final=True)
            aggregator.last_index = boundary
            break
        for message in workers.receive((t0 + (boundary + 1) * interval_ns - now) / 1e9):
            if isinstance(message, WorkerFailed):
                raise BenchError(f"worker {message.worker_index} failed: {message.error}")
            if isinstance(message, IntervalReport):
                aggregator.add_report(message)
        complete = aggregator.complete_interval(len(workers.processes))
        if progress is not None and complete > shown:
            shown = complete
            points = [p for p in aggregator.points() if p.index == shown]
            if points:
                progress(label, points[0])
    if window is not None:
        window.closed()
    workers.broadcast(Stop())
    return _collect_finals(workers, aggregator)


class _Samplers:
    """Broker PIDs (and Redis, when given) sampled at interval boundaries."""

    def __init__(
        self, probe: BrokerProbe, redis_probe: RedisProbe | None, aggregator: IntervalAggregator
    ) -> None:
        self.probe = probe
        self.redis_probe = redis_probe
        self.aggregator = aggregator
        self.commands: dict[str, int] = {}

    def sample(self, boundary: int, *, final: bool = False) -> None:
        self.aggregator.add_sample(boundary, self.probe.sample())
        if self.redis_probe is None:
            return
        redis_sample = self.redis_probe.sample(with_commands=boundary == 0 or final)
        if redis_sample is None:
            return
        self.aggregator.redis[boundary] = redis_sample
        first = self.aggregator.redis.get(0)
        if final and first is not None:
            self.commands = command_delta(first, redis_sample)


def _drained(plan: ScenarioPlan, aggregator: IntervalAggregator) -> bool:
    """Every planned message sent and every expected delivery received."""
    sent = aggregator.sent_total()
    if sent < _planned_messages(plan):
        return False
    return aggregator.delivered_total() >= sent * plan.deliveries_per_message


def _planned_messages(plan: ScenarioPlan) -> int:
    return sum(len(w.publishers) * w.messages_per_publisher for w in plan.workers)


def _collect_finals(workers: _Workers, aggregator: IntervalAggregator) -> list[FinalReport]:
    finals: list[FinalReport] = []
    deadline = time.monotonic() + 30.0
    while len(finals) < len(workers.processes) and time.monotonic() < deadline and workers.pipes:
        for message in workers.receive(1.0):
            if isinstance(message, IntervalReport):
                aggregator.add_report(message)
            elif isinstance(message, FinalReport):
                finals.append(message)
            elif isinstance(message, WorkerFailed):
                raise BenchError(f"worker {message.worker_index} failed: {message.error}")
    if len(finals) < len(workers.processes):
        raise BenchError(f"only {len(finals)} of {len(workers.processes)} final reports")
    return finals
