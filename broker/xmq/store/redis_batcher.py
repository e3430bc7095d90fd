"""Group commit: the Redis commands queued while a batch is out go together in the next one.

Callers queue commands with a callback (or await a future). With nothing waiting for Redis,
the first command of a tick schedules a flush with ``call_soon``: an idle node pays one round
trip, no timer. While a batch is out, commands queue up, and the batch's last reply schedules
the next flush (Nagle's rule, for pipelines): at most one batch in flight, so the batch size
follows the load by itself — many connections' records share each round trip and each
``write``/reply event while each caller still waits for its own reply. Replies call back in
order on the node's :class:`RespConnection`. A *deferred* command (an acknowledged record's
removal) starts no flush of its own: it rides with the next command's, or goes alone
``LAZY_FLUSH_S`` later — at low rates one round trip per message instead of two. That bound
is one timer that no flush cancels: firing, it flushes only deferred commands that have
waited ``LAZY_FLUSH_S``, else it is armed again for the oldest one still waiting (at 50
messages/s one timer per ~100 ms, not a timer and a cancel per message).

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

Connect-path calls (a session claim: ``call_script(..., ahead=True)``) do not wait behind
another client's bulk: one goes ahead of the durable records queued before it that write none
of its keys (never ahead of a plain command, nor of a record of its own session), and a
pipeline carries at most ``MAX_PIPELINE_ITEMS`` records, so the batch in flight that a claim
waits for is bounded too. A fan-out recording 200,000 records keeps its order; a CONNECT meanwhile
waits for at most ~two such pipelines, not for ``RECORDS_AHEAD`` records.

With ``wait_replicas`` N > 0 every pipeline ends with ``WAIT N timeout``, and its replies are
handed out only once N replicas have the pipeline's writes (``WAIT`` is sent again while fewer
have): an acknowledged write survives the loss of the master.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from collections.abc import Callable
from typing import Any, Final

from xmq.store.redis_endpoint import RedisEndpoint
from xmq.store.redis_errors import (
    RedisStats,
    RedisWriteFailed,
    error_kind,
    is_transient,
)
from xmq.store.resp_connection import (
    RedisConnectionLost,
    RedisReplyError,
    RespConnection,
    encode_command,
)

log = logging.getLogger("xmq.store.batcher")

Callback = Callable[[Any], None]
Guard = Callable[[], bool]


BACKOFF_FIRST_S: Final = 0.02
BACKOFF_MAX_S: Final = 1.0

LAZY_FLUSH_S: Final = 0.1
"""A ``deferred`` command waits at most this long for another command's flush to carry it."""

_LAZY_SLACK_S: Final = 0.001
"""The bound's timer fires on the loop's millisecond clock: a deferred command this close to
its bound goes now rather than after a timer of its own."""


ScriptCall = tuple[str, tuple[Any, ...], bytes]
"""A script call ready to send: its text (for ``EVAL`` after a ``NOSCRIPT`` reply), its
``EVALSHA`` command's arguments and their RESP encoding (see :func:`script_call`)."""

Combine = Callable[[Any, list[Any], bool], ScriptCall]
"""``combine(group, items, once)``: the script call carrying ``items``; ``once``: the form to
send again after a lost connection (it may have been applied)."""

_SHAS: dict[str, str] = {}


def script_sha(text: str) -> str:
    """The script's id in Redis (``EVALSHA``)."""
    sha = _SHAS.get(text)
    if sha is None:
        sha = _SHAS[text] = hashlib.sha1(text.encode()).hexdigest()  # noqa: S324 - Redis's id
    return sha


def script_call(text: str, keys: tuple[Any, ...], args: tuple[Any, ...]) -> ScriptCall:
    """The ``EVALSHA`` call of a script, encoded."""
    command = ("EVALSHA", script_sha(text), len(keys), *keys, *args)
    return text, command, encode_command(command)


_Item = tuple[Combine, Any, Any, tuple[str, ...], Callback]
"""A write queued to be coalesced with its neighbours into one script call: (``combine``,
``group``, the item, the keys it writes, its callback). A plain tuple: one per durable record,
made without a Python call. (An item is a durable write: kept, never failed fast.)"""


class _Entry:
    __slots__ = (
        "args",
        "batcher",
        "callback",
        "failing_since",
        "guard",
        "if_lost",
        "items",
        "payload",
        "retry",
        "script",
        "sent_at",
    )

    def __init__(
        self,
        args: tuple[Any, ...],
        callback: Callback | None,
        retry: bool,
        guard: Guard | None,
        script: str | None,
        items: list[_Item] | None = None,
        payload: bytes = b"",
    ) -> None:
        self.args = args
        self.callback = callback
        self.retry = retry
        self.guard = guard
        self.script = script  # the full text, for EVAL after a NOSCRIPT reply
        self.payload = payload or encode_command(args)
        self.failing_since = 0.0  # loop time of the first failure (0: none yet)
        self.if_lost: tuple[Any, ...] | None = None  # sent instead after a lost connection
        self.items = items  # a coalesced call: its items, each answered with its element
        self.batcher: RedisBatcher | None = None  # the batcher it was sent by (``__call__``)
        self.sent_at = 0.0  # loop time its pipeline was sent, when it ends it (else 0)

    def __call__(self, reply: Any) -> None:
        """Its reply (the entry is its own reply callback: no closure made per command)."""
        batcher = self.batcher
        if batcher is not None:
            batcher.replied(self, reply)

    def rewrite(self, args: tuple[Any, ...]) -> None:
        self.args = args
        self.payload = encode_command(args)


MAX_COALESCED: Final = 512
"""Items of one coalesced script call at most (bounds the time Redis spends in one script)."""

MAX_PIPELINE_ITEMS: Final = 4 * MAX_COALESCED
"""Coalesced items (durable records) of one pipeline at most: the rest go in the next one. It
bounds what a connect-path call sent next waits for in Redis (the batch in flight)."""


def _ignore(reply: Any) -> None:
    """A placeholder, replaced before the pipeline is sent."""


def _answer(entry: _Entry, reply: Any) -> None:
    """Its reply to whoever waits for the entry (each item of a coalesced call its part)."""
    if entry.items is not None:
        _hand_out(entry.items, reply)
    elif entry.callback is not None:
        try:
            entry.callback(reply)
        except Exception:
            log.exception("redis reply callback failed")


def _hand_out(items: list[_Item], reply: Any) -> None:
    """The reply of a coalesced call, handed out per item (an error to each of them)."""
    many = type(reply) is list and len(reply) == len(items)
    for n, item in enumerate(items):
        try:
            item[4](reply[n] if many else reply)
        except Exception:
            log.exception("redis reply callback failed")


class RedisBatcher:
    """Pipelines the commands of each loop tick on one Redis connection."""

    def __init__(
        self,
        endpoint: RedisEndpoint | str,
        timeout_s: float = 2.0,
        retry_for_s: float = 30.0,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
        stats: RedisStats | None = None,
    ) -> None:
        self.endpoint = (
            endpoint if isinstance(endpoint, RedisEndpoint) else RedisEndpoint.parse(endpoint)
        )
        self.timeout_s = timeout_s
        self.retry_for_s = retry_for_s
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self.stats = stats or RedisStats()
        self._conn: RespConnection | None = None
        self._address = ""  # host:port of the last connection
        self._connecting: asyncio.Task[None] | None = None
        self._pending: list[_Entry | _Item] = []  # commands, and writes to coalesce
        self._retrying: list[_Entry] = []  # sent again after the backoff, before _pending
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
        self._run: Callable[[], None] = self._flush
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

    # -- queueing ---------------------------------------------------------------------------

    def command(
        self,
        *args: Any,
        callback: Callback | None = None,
        retry: bool = True,
        guard: Guard | None = None,
        payload: bytes = b"",
    ) -> None:
        """Queue one command; ``callback`` gets its reply (or the exception when not retried).
        ``payload``: the command already encoded (``encode_command(args)``), if it was."""
        self._add(_Entry(args, callback, retry, guard, None, None, payload))

    def encoded(self, args: tuple[Any, ...], payload: bytes) -> None:
        """Queue a command nobody waits for, already encoded (``payload`` is
        ``encode_command(args)``): retried like ``command``, a direct call from compiled code."""
        self._add(_Entry(args, None, True, None, None, None, payload))

    def deferred(self, args: tuple[Any, ...], payload: bytes = b"") -> None:
        """Queue a command nobody waits for that need not go now: it rides with the next
        flush that another command causes, or goes alone ``LAZY_FLUSH_S`` later (retried like
        ``command``). It keeps its place: every command queued after it goes in the same
        pipeline or a later one, never before it. For removals whose loss is harmless (an
        acknowledged record's ``LREM``: a node killed before it re-sends the message)."""
        self._pending.append(_Entry(args, None, True, None, None, None, payload))
        self._deferred += 1
        self._idle = False
        if self._deferred_at < 0.0:  # the first since the last flush: its bound starts
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            self._deferred_at = loop.time()
            if self._lazy_timer is None:  # (else the timer armed earlier sees to it)
                self._lazy_timer = loop.call_later(LAZY_FLUSH_S, self._lazy_flush)

    def _lazy_flush(self) -> None:
        """The bound's timer: the deferred commands that waited ``LAZY_FLUSH_S`` go now; a
        flush that carried the ones it was armed for leaves it nothing to do (the next
        deferred command arms it again), one queued since waits for a timer of its own."""
        self._lazy_timer = None
        since = self._deferred_at
        if since < 0.0 or self._closed:
            return
        if self._armed or self._inflight or self._retry_timer is not None:
            return  # a flush is coming (the reply's end, the backoff's end): it carries them
        loop = self._loop or asyncio.get_running_loop()  # (set: ``deferred`` armed it)
        wait = since + LAZY_FLUSH_S - loop.time()
        if wait > _LAZY_SLACK_S:
            self._lazy_timer = loop.call_later(wait, self._lazy_flush)
            return
        if self._pending:
            self._flush()

    def script(
        self,
        text: str,
        keys: tuple[Any, ...],
        args: tuple[Any, ...],
        callback: Callback | None = None,
        retry: bool = True,
        guard: Guard | None = None,
        args_if_lost: tuple[Any, ...] | None = None,
    ) -> None:
        """Queue an ``EVALSHA`` (falls back to ``EVAL`` when Redis lost the script).

        ``args_if_lost``: the arguments to send instead when the call is cut off by a lost
        connection (it may have been applied: e.g. a record push made push-if-absent)."""
        sha = script_sha(text)
        entry = _Entry(("EVALSHA", sha, len(keys), *keys, *args), callback, retry, guard, text)
        if args_if_lost is not None:
            entry.if_lost = ("EVALSHA", sha, len(keys), *keys, *args_if_lost)
        self._add(entry)

    def coalesced(
        self,
        combine: Combine,
        group: Any,
        item: Any,
        keys: tuple[str, ...],
        callback: Callback,
    ) -> None:
        """Queue a durable write that goes out in ONE script call with the other items of the
        next flush (same ``combine`` and ``group``), placed where the first of them was queued.
        ``keys``: the keys it writes; a command queued between them that names one of those
        keys ends the call before it (every key's writes stay in their order).

        The call is built by ``combine`` at the flush; each item's ``callback`` gets its own
        element of the reply list, or the call's error (a refused call fails every item in
        it). It is retried as one entry: cut off by a lost connection it is sent again as
        ``combine(group, items, True)``."""
        self._add((combine, group, item, keys, callback))

    def call_script(
        self, text: str, keys: tuple[Any, ...], args: tuple[Any, ...], ahead: bool = False
    ) -> asyncio.Future[Any]:
        """Queue a script and return a future of its reply (not retried; errors raised).

        ``ahead``: a connect-path call — it goes before the durable records queued ahead of it
        that write none of ``keys`` (back to the last plain command or record sharing a key)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def done(reply: Any) -> None:
            if future.done():
                return
            if isinstance(reply, BaseException):
                future.set_exception(reply)
            else:
                future.set_result(reply)

        guard: Guard = lambda: not future.done()  # noqa: E731 - one closure, two uses
        if not ahead:
            self.script(text, keys, args, callback=done, retry=False, guard=guard)
            return future
        sha = script_sha(text)
        entry = _Entry(("EVALSHA", sha, len(keys), *keys, *args), done, False, guard, text)
        pending = self._pending
        at = len(pending)
        if at:
            named = set(keys)
            while at and type(item := pending[at - 1]) is tuple and named.isdisjoint(item[3]):
                at -= 1
        pending.insert(at, entry)
        self._idle = False
        if not self._armed and not self._inflight and self._retry_timer is None:
            self._arm()
        return future

    def _add(self, entry: _Entry | _Item) -> None:
        self._pending.append(entry)
        self._idle = False
        if not self._armed and not self._inflight and self._retry_timer is None:
            self._arm()

    def _arm(self) -> None:
        self._armed = True
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

    async def flush(self) -> None:
        """Wait until everything queued so far has been answered (later commands may not be).

        A ``PING`` queued behind them is answered after them (replies come in order), so this
        returns under continuous load too; a command re-sent meanwhile (a lost script, a lost
        connection) went behind that ``PING``, so another one follows it.
        """
        while not self._idle:
            resent = self.resent
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def answered(reply: Any, future: asyncio.Future[None] = future) -> None:
                if not future.done():
                    future.set_result(None)

            self.command("PING", callback=answered)
            await future
            if self.resent == resent:
                return

    # -- the writer -------------------------------------------------------------------------

    def _flush(self) -> None:
        self._armed = False
        if self._retry_timer is not None:
            return  # the backoff's end sends the retried commands first, then these
        if not self._pending:
            self._check_idle()
            return
        conn = self._conn
        if conn is None or conn.transport is None or conn.transport.is_closing():
            self._fail_fast(RedisConnectionLost("redis not connected"))
            self._reconnect()
            return
        batch, self._pending = self._pending, []
        # the deferred commands go in this pipeline (the bound's timer is left to find none)
        self._deferred_at = -1.0
        self._deferred = 0
        if len(batch) == 1 and not self.wait_replicas:
            # one command alone (at low rates, an acknowledgement's LREM): its payload is the
            # pipeline, the entry its only callback (no lists of parts, no join)
            alone = batch[0]
            if type(alone) is _Entry and alone.guard is None:
                loop = self._loop or asyncio.get_running_loop()  # (set: _flush runs after _arm)
                alone.batcher = self
                alone.sent_at = loop.time()  # it ends its pipeline: the round trip
                self._inflight += 1
                self.pipelines += 1
                self.commands += 1
                conn.send_one(alone.payload, alone)
                return
        parts: list[bytes] = []
        callbacks: list[Callback] = []
        # The coalesced items of the call being gathered, at the place of its first: they
        # join it across the commands queued between them unless such a command names a key
        # an item writes (an LREM of a record in it, an SREM of an inbound id in it); then the
        # call goes before that command and later items start a new one. So every key sees
        # its writes in the order they were queued.
        run: list[_Item] | None = None
        run_at = 0
        run_keys: set[str] | None = None  # the run's keys, gathered once a command follows
        items = 0
        for index, entry in enumerate(batch):
            if type(entry) is tuple:
                if items == MAX_PIPELINE_ITEMS:  # the rest go in the next pipeline
                    self._pending = batch[index:]
                    break
                items += 1
                if run is not None and (
                    entry[0] is not run[0][0] or entry[1] != run[0][1] or len(run) >= MAX_COALESCED
                ):
                    self._add_coalesced(run, run_at, parts, callbacks)
                    run = None
                if run is None:
                    run, run_at, run_keys = [entry], len(parts), None
                    parts.append(b"")
                    callbacks.append(_ignore)
                else:
                    run.append(entry)
                    if run_keys is not None:
                        run_keys.update(entry[3])
                continue
            assert type(entry) is _Entry
            if run is not None:
                if run_keys is None:
                    run_keys = {key for item in run for key in item[3]}
                if not run_keys.isdisjoint(entry.args):  # (keys are arguments)
                    self._add_coalesced(run, run_at, parts, callbacks)  # it goes before this
                    run = None
            if entry.guard is not None and not entry.guard():
                continue
            parts.append(entry.payload)
            callbacks.append(self._reply_for(entry))
        if run is not None:
            self._add_coalesced(run, run_at, parts, callbacks)
        if not parts:
            self._check_idle()
            return
        if self.wait_replicas:
            callbacks = self._after_wait(conn, parts, callbacks)
        self._inflight += len(parts)
        self.pipelines += 1
        self.commands += len(parts)
        last = callbacks[-1]
        if type(last) is _Entry:  # the pipeline's last reply also measures its round trip
            loop = self._loop or asyncio.get_running_loop()  # (set: _flush runs after _arm)
            last.sent_at = loop.time()
        else:
            callbacks[-1] = self._timed(last)
        conn.send(b"".join(parts), callbacks)

    def _add_coalesced(
        self, run: list[_Item], at: int, parts: list[bytes], callbacks: list[Callback]
    ) -> None:
        """One script call for a run of coalesced items, an entry retried like any other."""
        first = run[0]
        text, args, payload = first[0](first[1], [item[2] for item in run], False)
        entry = _Entry(args, None, True, None, text, run, payload)
        parts[at] = payload
        callbacks[at] = self._reply_for(entry)

    @staticmethod
    def _lost_form(items: list[_Item]) -> tuple[Any, ...]:
        """A coalesced call's form to send again after a lost connection."""
        first = items[0]
        return first[0](first[1], [item[2] for item in items], True)[1]

    def _timed(self, last: Callback) -> Callback:
        """The pipeline's last reply also measures its round trip."""
        loop = self._loop or asyncio.get_running_loop()  # (set: _flush runs after an _arm)
        sent_at = loop.time()

        def reply(value: Any) -> None:
            self.stats.round_trip(loop.time() - sent_at)
            last(value)

        return reply

    def _after_wait(
        self, conn: RespConnection, parts: list[bytes], callbacks: list[Callback]
    ) -> list[Callback]:
        """End the pipeline with ``WAIT n timeout``; its replies go out once enough replicas
        have its writes (``WAIT`` again while fewer have, on the same connection)."""
        held: list[tuple[Callback, Any]] = []
        wait = encode_command(("WAIT", self.wait_replicas, self.wait_timeout_ms))

        def holding(callback: Callback) -> Callback:
            return lambda value: held.append((callback, value))

        def waited(value: Any) -> None:
            self._inflight -= 1
            if (
                isinstance(value, int)
                and value < self.wait_replicas
                and conn is self._conn
                and not conn.closed.done()
            ):
                self.stats.error("wait_short")
                self._inflight += 1  # not enough replicas yet: wait again
                conn.send(wait, [waited])
                return
            if not isinstance(value, int):
                self.stats.error(error_kind(value) if isinstance(value, Exception) else "wait")
            # enough replicas (or the connection is gone: each reply says what happened to it)
            for callback, reply in held:
                lost = not isinstance(value, int) or value < self.wait_replicas
                callback(RedisConnectionLost("lost before WAIT") if lost else reply)
            if not self._inflight and self._pending and not self._armed:
                self._arm()
            self._check_idle()

        parts.append(wait)  # counted in flight with the others
        return [holding(callback) for callback in callbacks] + [waited]

    def _reply_for(self, entry: _Entry) -> Callback:
        entry.batcher = self
        entry.sent_at = 0.0  # (set again if it ends the pipeline)
        return entry  # its reply comes to ``replied``

    def replied(self, entry: _Entry, value: Any) -> None:
        """The reply of a command this batcher sent (``_Entry.__call__``)."""
        if entry.sent_at:  # it ended its pipeline: the round trip
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
            _answer(entry, value)
        if not self._inflight:
            if self._pending:
                if not self._armed:
                    self._arm()  # the batch is answered: what queued meanwhile goes now
            elif not self._retrying:
                self._idle = True

    def _error_reply(self, entry: _Entry, error: Exception) -> None:
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
                log.error("redis %s failed: %r", entry.args[0], error)
            error = RedisWriteFailed(f"{entry.args[0]}: {error}")
        _answer(entry, error)

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

    def _transient(self, entry: _Entry, error: Exception) -> None:
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
                    entry.args[0],
                    now - entry.failing_since,
                    kind,
                    error,
                )
                error = RedisWriteFailed(f"{entry.args[0]}: {kind} for {self.retry_for_s}s")
            _answer(entry, error)
            return
        if kind == "noscript":
            assert entry.script is not None
            entry.rewrite(("EVAL", entry.script, *entry.args[2:]))
        elif kind == "connection_lost" and entry.items is not None and entry.if_lost is None:
            entry.if_lost = self._lost_form(entry.items)
        if kind == "connection_lost" and entry.if_lost is not None:
            if entry.args[0] == "EVAL":  # (sent as EVAL after a NOSCRIPT already)
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
        kept: list[_Entry | _Item] = []
        for entry in self._pending:
            if isinstance(entry, tuple) or entry.retry:  # (a coalesced write is durable)
                kept.append(entry)
            elif entry.callback is not None:
                entry.callback(error)
        self._pending = kept
        self._check_idle()

    def _watch(self, conn: RespConnection) -> None:
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
