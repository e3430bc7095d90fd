"""The Redis side of a :class:`~xmq.store.redis_batcher.RedisBatcher`: its connection, the
replies of what it sent, and what a failure does to them.

Durable writes (``retry=True``) survive transient failures: a lost connection (reset, refused,
a failed connect) and the error replies Redis gives while it cannot take a write now
(``LOADING`` after a restart, ``BUSY``, ``TRYAGAIN``, ``MASTERDOWN``, ``READONLY`` from a
demoted master during a failover, ``NOSCRIPT`` — see :mod:`xmq.store.redis_errors`). They are
sent again, in their order and before anything queued later, after a jittered exponential
backoff (bounded); a ``READONLY`` reply also drops the connection so the next one goes to the
current master. A record push cut off by a lost connection may have been applied: it is re-sent
as push-if-absent (``args_if_lost``; records are unique), so it is never queued twice. A
write still failing after ``retry_for_s`` — or answered with any other error — is given up: its
callback gets the error (:class:`RedisWriteFailed`), never a success. Look-ups on the connect path
(``retry=False``) fail at once so the CONNECT can be answered 0x88.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any, Final

from xmq.core.turn_flush import TurnFlush
from xmq.store.batch_entries import BatchEntry, CoalescedItem, answer, hand_out
from xmq.store.redis_endpoint import RedisEndpoint
from xmq.store.redis_errors import (
    RedisStats,
    RedisWriteFailed,
    error_kind,
    is_transient,
)
from xmq.store.resp_connection import RedisConnectionLost, RedisReplyError, RespConnection

log = logging.getLogger("xmq.store.batcher")

BACKOFF_FIRST_S: Final = 0.02
BACKOFF_MAX_S: Final = 1.0

RTT_EVERY: Final = 16
"""One pipeline in this many has its round trip measured (``RedisStats.round_trip``): at low
rates a pipeline is a durable message, and timing each cost two clock reads and the
histogram's update per message. The histogram is of the sampled pipelines (its help says so)."""


class BatcherLink:
    """The connection, replies and retries of a batcher (``RedisBatcher`` queues and flushes)."""

    def __init__(
        self,
        endpoint: RedisEndpoint | str,
        timeout_s: float = 2.0,
        retry_for_s: float = 30.0,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
        stats: RedisStats | None = None,
        turn: TurnFlush | None = None,
        rtt_every: int = RTT_EVERY,
    ) -> None:
        self.endpoint = (
            endpoint if isinstance(endpoint, RedisEndpoint) else RedisEndpoint.parse(endpoint)
        )
        self.timeout_s = timeout_s
        self.retry_for_s = retry_for_s
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self.stats = stats or RedisStats()
        self.rtt_every = max(1, rtt_every)  # one pipeline's round trip measured in this many
        self._untimed = 1  # pipelines until the next measured one (the first is)
        self._conn: RespConnection | None = None
        self._address = ""  # host:port of the last connection
        self._connecting: asyncio.Task[None] | None = None
        self._pending: list[BatchEntry | CoalescedItem] = []  # commands, and writes to coalesce
        self._retrying: list[BatchEntry] = []  # sent again after the backoff, before _pending
        self._retry_timer: asyncio.TimerHandle | None = None
        self._backoff_s = BACKOFF_FIRST_S
        self._inflight = 0
        self._armed = False
        self._lazy_timer: asyncio.TimerHandle | None = None  # the bound of deferred commands
        # loop time the oldest deferred command not yet in a pipeline was queued (< 0: none)
        self._deferred_at = -1.0
        self._deferred = 0  # deferred commands in _pending (fewer once a flush split them)
        self._closed = False
        self._idle = True  # nothing queued or waiting for a reply (a flag: nobody awaits it)
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop it flushes in
        # bound once (compiled, ``loop.call_soon(self._flush)`` looked the method up and made
        # a bound ``_flush`` at every arm: once a durable message at low rates)
        self._call_soon: Callable[[Callable[[], None]], object] | None = None
        self._run: Callable[[], None] = self._scheduled_flush
        # the process's per-turn flush (``core.turn_flush``): a flush armed within a read (a
        # client's, a node link's, a Redis reply's) runs at that read's end, not in a
        # ``call_soon`` of its own; None: ``call_soon``
        self._turn = turn
        self.pipelines = 0
        self.commands = 0
        self.failures = 0
        self.resent = 0  # commands queued again after a transient failure
        self._fenced_logged = float("-inf")  # loop time of the last warning about fenced writes

    async def start(self) -> None:
        """Connect (raises when Redis does not answer)."""
        self._conn = await RespConnection.open(self.endpoint, self.timeout_s)
        self._address = self._conn.address
        self._watch(self._conn)

    async def close(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        if self._retry_timer is not None:
            self._retry_timer.cancel()
        if self._lazy_timer is not None:
            self._lazy_timer.cancel()
        if self._conn is not None:
            self._conn.close()

    def _arm(self) -> None:
        self._armed = True
        turn = self._turn
        if turn is not None:
            turn.add(self._run)  # at the end of the read running now, else of this loop turn
            return
        call_soon = self._call_soon
        if call_soon is None:
            loop = self._loop
            if loop is None:  # (get_running_loop() makes a getpid system call in Python 3.11)
                loop = self._loop = asyncio.get_running_loop()  # a batcher serves one loop
            call_soon = self._call_soon = loop.call_soon
        call_soon(self._run)

    @property
    def idle(self) -> bool:
        """Nothing queued or waiting for a reply."""
        return self._idle

    @property
    def settled(self) -> bool:
        """Nothing in flight or waiting to be sent again, and nothing queued but deferred
        commands (an acknowledged record's removal, which nobody waits for)."""
        return not self._inflight and not self._retrying and len(self._pending) == self._deferred

    @property
    def backlog(self) -> int:
        return len(self._pending) + len(self._retrying) + self._inflight

    @property
    def queued(self) -> int:
        """Commands waiting to be sent (not yet in a pipeline)."""
        return len(self._pending)

    @property
    def inflight(self) -> int:
        """Commands sent, waiting for their reply."""
        return self._inflight

    @property
    def retrying(self) -> int:
        """Commands waiting for their backoff to be sent again."""
        return len(self._retrying)

    @staticmethod
    def _lost_form(items: list[CoalescedItem]) -> tuple[Any, ...]:
        """A coalesced call's form to send again after a lost connection."""
        first = items[0]
        return first[0](first[1], [item[2] for item in items], True, False)[1]

    def _timing(self) -> bool:
        """Whether the pipeline being sent has its round trip measured (one in
        ``rtt_every``)."""
        left = self._untimed
        if left > 1:
            self._untimed = left - 1
            return False
        self._untimed = self.rtt_every
        return True

    def _flush(self) -> None:
        """Send what is queued (``RedisBatcher._flush``)."""
        raise NotImplementedError

    def _scheduled_flush(self) -> None:
        """The flush ``_arm`` scheduled: run among other connections' flushes at a read's end
        (``TurnFlush.end_read``), a failure here must not keep theirs from running."""
        try:
            self._flush()
        except Exception:
            log.exception("redis batcher flush failed")

    def reply_time(self) -> float:
        """The loop time at which the read handing out a reply now began
        (``RespConnection.read_at``: read once per Redis read), 0.0 outside such a read."""
        conn = self._conn
        return conn.read_at if conn is not None else 0.0

    def replied(self, entry: BatchEntry, value: Any) -> None:
        """The reply of a command this batcher sent (``BatchEntry.__call__``)."""
        if entry.sent_at:  # it ended a timed pipeline: the round trip
            loop = self._loop or asyncio.get_running_loop()
            self.stats.round_trip(loop.time() - entry.sent_at)
        self._inflight -= 1
        kind = type(value)  # (a list, an int or bytes is a reply: no isinstance look-up)
        if (
            kind is not list
            and kind is not int
            and kind is not bytes
            and isinstance(value, Exception)
        ):
            self._error_reply(entry, value)
        else:
            if self._backoff_s != BACKOFF_FIRST_S:
                self._backoff_s = BACKOFF_FIRST_S  # Redis answers again
            if entry.failing_since:
                self.stats.recovered += 1
            items = entry.items
            if items is not None:  # a coalesced call: each item its element
                hand_out(items, value)
            else:
                answer(entry, value)
        if not self._inflight:
            if self._pending:
                if not self._armed:
                    self._arm()  # the batch is answered: what queued meanwhile goes now
            elif not self._retrying:
                self._idle = True

    def _error_reply(self, entry: BatchEntry, error: Exception) -> None:
        """An error reply or a lost connection: sent again when it may pass, else given up."""
        if isinstance(error, RedisConnectionLost | RedisReplyError) and is_transient(error):
            self._transient(entry, error)
            return
        if entry.failing_since:
            self.stats.recovered += 1
        if isinstance(error, RedisReplyError):
            kind = error_kind(error)
            self.stats.error(kind)
            self.stats.given_up += 1
            if kind == "fenced":  # this run lost its lease: counted, said once
                self._log_fenced(error)
            else:
                log.error("redis %s failed: %r", entry.arguments()[0], error)
            error = RedisWriteFailed(f"{entry.arguments()[0]}: {error}")
        answer(entry, error)

    def _log_fenced(self, error: RedisReplyError) -> None:
        """One warning per second at most for writes refused because this run lost its lease
        (a node going offline can have many pending; ``xmq_redis_errors{kind="fenced"}``)."""
        now = asyncio.get_running_loop().time()
        if now - self._fenced_logged >= 1.0:
            self._fenced_logged = now
            log.warning(
                "redis refused writes of this run (%d so far): %s",
                self.stats.errors["fenced"],
                error,
            )

    def _transient(self, entry: BatchEntry, error: Exception) -> None:
        """A failure that may pass: send the entry again after the backoff (in order)."""
        kind = error_kind(error)
        self.stats.error(kind)
        self.failures += 1
        now = asyncio.get_running_loop().time()
        if not entry.failing_since:
            entry.failing_since = now
        retry = entry.retry or kind == "noscript"  # not run: sent as EVAL, also a look-up
        if not retry or now - entry.failing_since > self.retry_for_s:
            if entry.retry:
                self.stats.given_up += 1
                log.error(
                    "redis %s given up after %.1fs of %s: %r",
                    entry.arguments()[0],
                    now - entry.failing_since,
                    kind,
                    error,
                )
                error = RedisWriteFailed(f"{entry.arguments()[0]}: {kind} for {self.retry_for_s}s")
            answer(entry, error)
            return
        if kind == "noscript":
            assert entry.script is not None
            entry.rewrite(("EVAL", entry.script, *entry.arguments()[2:]))
        elif kind == "connection_lost" and entry.items is not None and entry.if_lost is None:
            entry.if_lost = self._lost_form(entry.items)
        if kind == "connection_lost" and entry.if_lost is not None:
            if entry.arguments()[0] == "EVAL":  # (sent as EVAL after a NOSCRIPT already)
                entry.rewrite(("EVAL", entry.script, *entry.if_lost[2:]))
            else:
                entry.rewrite(entry.if_lost)
        if kind == "readonly":  # a demoted master: the next connection finds the new one
            conn = self._conn
            if conn is not None:
                conn.close()
        self.stats.retried(kind)
        self.resent += 1
        self._retrying.append(entry)
        self._idle = False
        if self._retry_timer is None:
            delay = 0.0 if kind == "noscript" else self._backoff_s * random.uniform(0.5, 1.0)
            if kind != "noscript":
                self._backoff_s = min(self._backoff_s * 2, BACKOFF_MAX_S)
            self._retry_timer = asyncio.get_running_loop().call_later(delay, self._retry)

    def _retry(self) -> None:
        self._retry_timer = None
        if self._inflight:
            # replies of the failed batch still coming: they join the retried ones first
            self._retry_timer = asyncio.get_running_loop().call_later(0.001, self._retry)
            return
        self._pending[:0] = self._retrying
        self._retrying = []
        if self._pending and not self._armed:
            self._arm()

    def _check_idle(self) -> None:
        if not self._pending and not self._inflight and not self._retrying:
            self._idle = True

    def _fail_fast(self, error: Exception) -> None:
        """Without a connection, connect-path look-ups fail now; durable writes wait."""
        kept: list[BatchEntry | CoalescedItem] = []
        for entry in self._pending:
            if isinstance(entry, tuple) or entry.retry:  # (a coalesced write is durable)
                kept.append(entry)
            elif entry.callback is not None:
                entry.callback(error)
        self._pending = kept
        self._check_idle()

    def _watch(self, conn: RespConnection) -> None:
        if self._turn is not None:
            conn.read_in_turns(self._turn)  # its replies' output written at the read's end

        def lost(_: asyncio.Future[None]) -> None:
            if self._conn is conn:
                self._conn = None
                self.stats.error("connection_lost")
                if not self._closed:
                    self._reconnect()

        conn.closed.add_done_callback(lost)

    def _reconnect(self) -> None:
        if self._closed or self._connecting is not None:
            return
        self._connecting = asyncio.get_running_loop().create_task(
            self._connect_loop(), name="redis-reconnect"
        )

    async def _connect_loop(self) -> None:
        delay = BACKOFF_FIRST_S
        failed = 0
        try:
            while not self._closed:
                try:
                    conn = await RespConnection.open(self.endpoint, self.timeout_s)
                except (OSError, TimeoutError, RedisReplyError) as error:
                    self.failures += 1
                    self.stats.error(error_kind(error))
                    failed += 1
                    if failed % 20 == 1:
                        log.warning("redis connection failed: %r", error)
                    await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                    delay = min(delay * 2, BACKOFF_MAX_S)
                    continue
                if failed:
                    log.warning("redis connected again (%s)", conn.address)
                if self._address and conn.address != self._address:
                    self.stats.master_changes += 1
                    log.warning("redis master is now %s (was %s)", conn.address, self._address)
                self._address = conn.address
                self._conn = conn
                self._watch(conn)
                if self._pending and not self._armed and self._retry_timer is None:
                    self._arm()
                return
        finally:
            self._connecting = None
