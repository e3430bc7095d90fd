"""A load-client worker process: its share of the connections, on one uvloop event loop.

Life cycle, driven by the runner over two one-way pipes (commands in, reports out; the
command pipe is watched by the event loop, which makes it non-blocking, so reports, which can be
large, travel on their own blocking pipe): connect subscribers and subscribe, connect
publishers, report Ready; on Start, publish by schedule (message m of this worker is due at
t0 + m / rate, spread round-robin over its publishers), connect the idle clients of the
``connections`` scenario by schedule, and report each interval; on Stop, send the final report
(sent counts and sequence bitmaps), disconnect and exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import time
from collections.abc import Awaitable, Callable, Sequence
from multiprocessing.connection import Connection
from time import monotonic_ns

import uvloop

from xmq.bench.accounting import SeqTracker, TrackerSnapshot
from xmq.bench.connection import BenchConnection, CounterSink
from xmq.bench.histogram import bucket_index
from xmq.bench.packets import PublishTemplate, encode_connect, encode_subscribe
from xmq.bench.plan import (
    ConnectStats,
    FinalReport,
    IntervalReport,
    Ready,
    Start,
    Stop,
    WorkerFailed,
    WorkerPlan,
)
from xmq.bench.publish_schedule import PublishSchedule

_MAX_PENDING_CONNECTS = 1000


def worker_main(plan: WorkerPlan, commands: Connection, reports: Connection) -> None:
    """Process entry point (spawned by the runner)."""
    try:
        _raise_file_limit()
        uvloop.run(WorkerProcess(plan, commands, reports).run())
    except Exception as exc:  # report, never hang the runner
        with contextlib.suppress(OSError):
            reports.send(WorkerFailed(plan.worker_index, f"{type(exc).__name__}: {exc}"))
    finally:
        commands.close()
        reports.close()


def _raise_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class WorkerProcess:
    def __init__(self, plan: WorkerPlan, commands: Connection, reports: Connection) -> None:
        self.plan = plan
        self.commands = commands
        self.pipe = reports
        self.sink = CounterSink()
        self.connections: list[BenchConnection] = []
        self.publishers: list[BenchConnection] = []
        self.receivers: dict[int, dict[int, SeqTracker]] = {}
        self.inbox: asyncio.Queue[Start | Stop] = asyncio.Queue()
        self.t0_ns = 0
        self.cpu_mark = time.process_time()
        self.wall_mark = time.monotonic()
        self.interval_index = 0
        self.interval_handle: asyncio.TimerHandle | None = None
        self.source_cursor = 0
        self.last_connack_ns = 0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(self.commands.fileno(), self._read_commands)
        try:
            await self._setup()
            command = await self.inbox.get()
            schedule: PublishSchedule | None = None
            idle_task: asyncio.Task[ConnectStats] | None = None
            if isinstance(command, Start):
                self.t0_ns = command.t0_ns
                self.cpu_mark = time.process_time()
                self.wall_mark = time.monotonic()
                self._arm_interval()
                ping_task = asyncio.create_task(self._keepalive(), name="bench-keepalive")
                if self.publishers:
                    schedule = PublishSchedule(
                        self.publishers,
                        self.plan.rate_per_publisher,
                        self.plan.messages_per_publisher,
                        self.t0_ns,
                        on_lag=self.sink.record_lag,
                    )
                    schedule.start()
                if self.plan.idle_clients:
                    idle_task = asyncio.create_task(self._connect_idle(), name="bench-idle")
                command = await self.inbox.get()
                ping_task.cancel()
            if schedule is not None:
                schedule.stop()
            if idle_task is not None:
                idle_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await idle_task
            self._finish(schedule)
            await self._disconnect_all()
        finally:
            loop.remove_reader(self.commands.fileno())

    def _read_commands(self) -> None:
        while self.commands.poll():
            try:
                message = self.commands.recv()
            except EOFError:
                self.inbox.put_nowait(Stop())
                asyncio.get_running_loop().remove_reader(self.commands.fileno())
                return
            if isinstance(message, Start | Stop):
                self.inbox.put_nowait(message)

    # -- setup ------------------------------------------------------------------------------
    def _next_source(self) -> str | None:
        sources = self.plan.source_addresses
        if not sources:
            return None
        source = sources[self.source_cursor % len(sources)]
        self.source_cursor += 1
        return source

    async def _open(
        self,
        client_id: str,
        stats: ConnectStats,
        *,
        node: int = 0,
        trackers: dict[int, SeqTracker] | None = None,
        template: PublishTemplate | None = None,
        publisher_id: int = -1,
    ) -> BenchConnection | None:
        plan = self.plan
        loop = asyncio.get_running_loop()
        packet = encode_connect(
            client_id,
            protocol=plan.protocol,
            keepalive=plan.keepalive,
            clean_start=plan.session_expiry == 0,
            session_expiry=plan.session_expiry,
        )
        connection = BenchConnection(
            self.sink,
            packet,
            protocol=plan.protocol,
            trackers=trackers,
            template=template,
            publisher_id=publisher_id,
        )
        source = self._next_source()
        stats.attempted += 1
        try:
            async with asyncio.timeout(plan.connect_timeout_s):
                target = plan.node_target(node)
                await loop.create_connection(
                    lambda: connection,
                    target.host,
                    target.port,
                    local_addr=(source, 0) if source else None,
                )
                connack = await connection.connack
        except (OSError, TimeoutError, ConnectionError, ValueError) as exc:
            stats.failed += 1
            if not stats.first_error:
                stats.first_error = f"{type(exc).__name__}: {exc}"
            if connection.transport is not None:
                connection.transport.abort()
            return None
        if connack.reason_code != 0:
            stats.refused += 1
            if not stats.first_error:
                stats.first_error = f"CONNACK reason 0x{connack.reason_code:02x}"
            return None
        stats.connected += 1
        stats.latencies_us.append((connection.connack_ns - connection.connect_sent_ns) // 1000)
        self.connections.append(connection)
        return connection

    async def _paced(
        self,
        count: int,
        rate: float,
        opener: Callable[[int], Awaitable[None]],
        start_ns: int = 0,
    ) -> None:
        """Run ``opener(i)`` for i in 0..count-1, the i-th at start + i/rate (bounded overlap)."""
        start = start_ns or monotonic_ns()
        gate = asyncio.Semaphore(_MAX_PENDING_CONNECTS)

        async def one(index: int) -> None:
            try:
                await opener(index)
            finally:
                gate.release()

        async with asyncio.TaskGroup() as group:
            for index in range(count):
                due = start + int(index * 1e9 / rate) if rate > 0 else start
                delay = due - monotonic_ns()
                if delay >= 1_000_000:  # uvloop timers have 1 ms resolution: never spin
                    await asyncio.sleep(delay / 1e9)
                await gate.acquire()
                group.create_task(one(index))

    async def _setup(self) -> None:
        plan = self.plan
        stats = ConnectStats()
        started = time.monotonic()
        subscribers = plan.subscribers

        async def open_subscriber(index: int) -> None:
            spec = subscribers[index]
            trackers = self.receivers.setdefault(spec.receiver, {})
            connection = await self._open(spec.client_id, stats, node=spec.node, trackers=trackers)
            if connection is None:
                return
            packet = encode_subscribe(1, list(spec.filters), qos=plan.qos, protocol=plan.protocol)
            async with asyncio.timeout(plan.connect_timeout_s):
                codes = await connection.subscribe(packet)
            if any(code >= 0x80 for code in codes):
                raise RuntimeError(f"SUBSCRIBE refused for {spec.client_id}: {codes}")

        await self._paced(len(subscribers), plan.connect_rate, open_subscriber)
        publishers = plan.publishers

        async def open_publisher(index: int) -> None:
            spec = publishers[index]
            template = PublishTemplate(spec.topic, qos=plan.qos, protocol=plan.protocol)
            connection = await self._open(
                spec.client_id,
                stats,
                node=spec.node,
                template=template,
                publisher_id=spec.publisher_id,
            )
            if connection is not None:
                self.publishers.append(connection)

        await self._paced(len(publishers), plan.connect_rate, open_publisher)
        stats.elapsed_s = time.monotonic() - started
        receive_max = min((p.receive_maximum for p in self.publishers), default=65535)
        self.pipe.send(Ready(plan.worker_index, stats, receive_max))

    async def _connect_idle(self) -> ConnectStats:
        stats = ConnectStats()
        clients = self.plan.idle_clients
        counters_of = self.sink

        async def open_idle(index: int) -> None:
            before = len(stats.latencies_us)
            node = index * self.plan.worker_count + self.plan.worker_index  # round-robin split
            connection = await self._open(clients[index], stats, node=node)
            if connection is not None:
                self.last_connack_ns = max(self.last_connack_ns, connection.connack_ns)
            if len(stats.latencies_us) > before:
                latency = stats.latencies_us[-1]
                counters = counters_of.counters
                counters.delivered += 1
                counters.hist[bucket_index(latency)] += 1
                counters.lat_sum_us += latency
                counters.lat_max_us = max(counters.lat_max_us, latency)

        await self._paced(len(clients), self.plan.connect_rate, open_idle, self.t0_ns)
        return stats

    # -- measuring --------------------------------------------------------------------------
    def _arm_interval(self) -> None:
        loop = asyncio.get_running_loop()
        boundary = self.t0_ns + int((self.interval_index + 1) * self.plan.interval_s * 1e9)
        delay = max(0.0, (boundary - monotonic_ns()) / 1e9)
        self.interval_handle = loop.call_later(delay, self._interval_elapsed)

    def _interval_elapsed(self) -> None:
        self._report_interval()
        self.interval_index += 1
        self._arm_interval()

    def _report_interval(self) -> None:
        counters = self.sink.swap()
        cpu = time.process_time()
        wall = time.monotonic()
        report = IntervalReport(
            worker_index=self.plan.worker_index,
            index=self.interval_index,
            sent=counters.sent,
            delivered=counters.delivered,
            duplicates=counters.duplicates,
            hist={i: c for i, c in enumerate(counters.hist) if c},
            lat_total=counters.delivered,
            lat_sum_us=counters.lat_sum_us,
            lat_max_us=counters.lat_max_us,
            send_lag_max_us=counters.send_lag_max_us,
            held_back=counters.held_back,
            cpu_s=cpu - self.cpu_mark,
            wall_s=wall - self.wall_mark,
            connections=self.sink.live,
            connection_losses=counters.connection_losses,
        )
        self.cpu_mark = cpu
        self.wall_mark = wall
        self.pipe.send(report)

    async def _keepalive(self) -> None:
        period = max(1.0, self.plan.keepalive / 2)
        while True:
            await asyncio.sleep(period)
            for connection in self.connections:
                connection.ping()

    def _finish(self, schedule: PublishSchedule | None) -> None:
        if self.interval_handle is not None:
            self.interval_handle.cancel()
            if self.t0_ns:
                self._report_interval()
        trackers: dict[tuple[int, int], TrackerSnapshot] = {}
        for receiver, by_publisher in self.receivers.items():
            for publisher, tracker in by_publisher.items():
                trackers[(receiver, publisher)] = TrackerSnapshot.of(tracker)
        done_s = (schedule.done_ns - self.t0_ns) / 1e9 if schedule and schedule.done_ns else 0.0
        self.pipe.send(
            FinalReport(
                worker_index=self.plan.worker_index,
                sent={p.publisher_id: p.seq for p in self.publishers},
                trackers=trackers,
                cpu_s=time.process_time(),
                connection_losses=sum(1 for c in self.connections if c.closed.done()),
                disconnect_reasons=dict(self.sink.disconnect_reasons),
                publishing_done_s=done_s,
                last_connect_s=max(0.0, (self.last_connack_ns - self.t0_ns) / 1e9),
            )
        )

    async def _disconnect_all(self) -> None:
        waits: Sequence[asyncio.Future[None]] = [c.closed for c in self.connections]
        expire = self.plan.session_expiry > 0
        for connection in self.connections:
            connection.disconnect(expire_session=expire)
        if waits:
            await asyncio.wait(waits, timeout=5.0)
