"""Group commit: the Redis commands queued while a batch is out go together in the next one.

Callers queue commands with a callback (or await a future). With nothing waiting for Redis,
the first command of a tick schedules a flush: at the end of the read that queued it (a
client's, a node link's, a Redis reply's: the process's per-turn flush, ``core.turn_flush``,
given as ``turn``), else with ``call_soon``; an idle node pays one round trip, no timer. While
a batch is out, commands queue up, and the batch's last reply schedules the next flush
(Nagle's rule, for pipelines): at most one batch in flight, so the batch size
follows the load by itself — many connections' records share each round trip and each
``write``/reply event while each caller still waits for its own reply. Replies call back in
order on the node's :class:`RespConnection`. A *deferred* command or coalesced write (an
acknowledged record's removal) starts no flush of its own: it rides with the next command's
(a write in the next script call of its group), or goes alone
``LAZY_FLUSH_S`` later — at low rates one round trip per message instead of two. That bound
is one timer that no flush cancels: firing, it flushes only deferred commands that have
waited ``LAZY_FLUSH_S``, else it is armed again for the oldest one still waiting (at 50
messages/s one timer per ~100 ms, not a timer and a cancel per message).

Durable writes survive transient failures (retried after a backoff, in order; see
:mod:`xmq.store.batcher_link`).

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
from typing import Any, Final, cast

from xmq.store.batch_entries import (
    MAX_COALESCED,
    MAX_PIPELINE_ITEMS,
    BatchEntry,
    Callback,
    CoalescedItem,
    Combine,
    Guard,
    ScriptCall,
    ignore,
    script_call,
    script_sha,
)
from xmq.store.batcher_link import BatcherLink
from xmq.store.fenced_calls import FENCED_COMBINE, FencedCalls
from xmq.store.redis_errors import error_kind
from xmq.store.resp_connection import RedisConnectionLost, RespConnection, encode_command

__all__ = ["MAX_PIPELINE_ITEMS", "RedisBatcher", "ScriptCall", "script_call", "script_sha"]

LAZY_FLUSH_S: Final = 0.1
"""A ``deferred`` command waits at most this long for another command's flush to carry it."""

_LAZY_SLACK_S: Final = 0.001
"""The bound's timer fires on the loop's millisecond clock: a deferred command this close to
its bound goes now rather than after a timer of its own."""


class RedisBatcher(BatcherLink):
    """Pipelines the commands of each loop tick on one Redis connection."""

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
        self._add(BatchEntry(args, callback, retry, guard, None, None, payload))

    def encoded(self, args: tuple[Any, ...], payload: bytes) -> None:
        """Queue a command nobody waits for, already encoded (``payload`` is
        ``encode_command(args)``): retried like ``command``, a direct call from compiled code."""
        self._add(BatchEntry(args, None, True, None, None, None, payload))

    def deferred(self, args: tuple[Any, ...], payload: bytes = b"") -> None:
        """Queue a command nobody waits for that need not go now: it rides with the next
        flush that another command causes, or goes alone ``LAZY_FLUSH_S`` later (retried like
        ``command``). It keeps its place: every command queued after it goes in the same
        pipeline or a later one, never before it. For removals whose loss is harmless (an
        acknowledged record's ``LREM``: a node killed before it re-sends the message)."""
        self._pending.append(BatchEntry(args, None, True, None, None, None, payload))
        self._defer()

    def deferred_coalesced(
        self, combine: Combine, group: Any, item: Any, keys: tuple[str, ...], callback: Callback
    ) -> None:
        """``coalesced`` on ``deferred``'s terms: a write that starts no flush of its own, in
        the next script call of its group that another command's flush sends, or alone
        ``LAZY_FLUSH_S`` later (an acknowledged record's removal, carried by the next record's
        ``FENCED_WRITES`` call: no command and no reply of its own)."""
        self._pending.append((combine, group, item, keys, callback))
        self._defer()

    def _defer(self) -> None:
        """A deferred command or write was queued: its bound starts (``LAZY_FLUSH_S``)."""
        self._deferred += 1
        self._idle = False
        if self._deferred_at < 0.0:  # the first since the last flush: its bound starts
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            # from the latest Redis read's time (read there once; at low rates the reply that
            # delivered the message just acknowledged, a moment ago), never a later time than
            # the clock's: the command still goes ``LAZY_FLUSH_S`` after it at the latest
            # (sooner by the time since that read); no read of a turn yet: the clock's
            conn = self._conn
            since = conn.last_read_at if conn is not None else 0.0
            self._deferred_at = since if since > 0.0 else loop.time()
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
        entry = BatchEntry(("EVALSHA", sha, len(keys), *keys, *args), callback, retry, guard, text)
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
        entry = BatchEntry(("EVALSHA", sha, len(keys), *keys, *args), done, False, guard, text)
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

    def _add(self, entry: BatchEntry | CoalescedItem) -> None:
        self._pending.append(entry)
        self._idle = False
        if not self._armed and not self._inflight and self._retry_timer is None:
            self._arm()

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
        transport = conn.transport if conn is not None else None
        if conn is None or transport is None or transport.is_closing():
            self._fail_fast(RedisConnectionLost("redis not connected"))
            self._reconnect()
            return
        batch, self._pending = self._pending, []
        # the deferred commands go in this pipeline (the bound's timer is left to find none)
        self._deferred_at = -1.0
        self._deferred = 0
        if len(batch) <= MAX_COALESCED and not self.wait_replicas:
            alone = self._alone(batch)
            if alone is not None:
                # one command alone (at low rates, a record's call carrying the removal of the
                # one acknowledged before): its payload is the pipeline, the entry its only
                # callback (no lists of parts, no join)
                alone.batcher = self
                if self._timing():  # it ends its pipeline: the round trip (one in N)
                    loop = self._loop or asyncio.get_running_loop()  # (set: _flush after _arm)
                    alone.sent_at = loop.time()
                else:
                    alone.sent_at = 0.0
                self._inflight += 1
                self.pipelines += 1
                self.commands += 1
                conn.send_open(transport, alone.payload, alone)
                return
        parts: list[bytes] = []
        callbacks: list[Callback] = []
        # The coalesced items of the call being gathered, at the place of its first: they
        # join it across the commands queued between them unless such a command names a key
        # an item writes (an LREM of a record in it, an SREM of an inbound id in it); then the
        # call goes before that command and later items start a new one. So every key sees
        # its writes in the order they were queued.
        run: list[CoalescedItem] | None = None
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
                    callbacks.append(ignore)
                else:
                    run.append(entry)
                    if run_keys is not None:
                        run_keys.update(entry[3])
                continue
            assert type(entry) is BatchEntry
            if run is not None:
                if run_keys is None:
                    run_keys = {key for item in run for key in item[3]}
                if not run_keys.isdisjoint(entry.arguments()):  # (keys are arguments)
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
        timed = self._timing()  # (one pipeline in ``rtt_every``)
        if type(last) is BatchEntry:  # the pipeline's last reply also measures its round trip
            if timed:
                loop = self._loop or asyncio.get_running_loop()  # (set: _flush after _arm)
                last.sent_at = loop.time()
            if len(parts) == 1:  # one command (a script call carrying a batch's writes)
                conn.send_one(parts[0], last)
                return
        elif timed:
            callbacks[-1] = self._timed(last)
        conn.send(b"".join(parts), callbacks)

    @staticmethod
    def _alone(batch: list[BatchEntry | CoalescedItem]) -> BatchEntry | None:
        """The one command a batch is (a command without a guard, or one script call of
        coalesced writes of one group), else None (the batch is gathered entry by entry)."""
        first = batch[0]
        if isinstance(first, BatchEntry):
            return first if len(batch) == 1 and first.guard is None else None
        # (the items read as tuples of any length: compiled, none unpacked whole)
        items = cast("list[BatchEntry | tuple[Any, ...]]", batch)
        combine, group = first[0], first[1]
        for entry in items:
            if isinstance(entry, BatchEntry) or entry[0] is not combine:
                return None
            if entry[1] is not group and entry[1] != group:
                return None
        return _coalesced_entry(cast("list[CoalescedItem]", batch))  # (each one checked)

    def _add_coalesced(
        self, run: list[CoalescedItem], at: int, parts: list[bytes], callbacks: list[Callback]
    ) -> None:
        """One script call for a run of coalesced items, an entry retried like any other."""
        entry = _coalesced_entry(run)
        parts[at] = entry.payload
        callbacks[at] = self._reply_for(entry)

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

    def _reply_for(self, entry: BatchEntry) -> Callback:
        entry.batcher = self
        entry.sent_at = 0.0  # (set again if it ends the pipeline)
        return entry  # its reply comes to ``replied``


def _coalesced_entry(run: list[CoalescedItem]) -> BatchEntry:
    """The script call of a run of coalesced writes: its payload only (``bare``), the
    arguments built again for a retry or a log line (``BatchEntry.arguments``)."""
    first = cast("list[tuple[Any, ...]]", run)[0]  # (compiled: not unpacked whole)
    group = first[1]
    if type(group) is FencedCalls and first[0] is FENCED_COMBINE:
        # this run's durable writes: a direct call (compiled: no generic call of ``combine``
        # with a list of the writes, its arguments parsed)
        text, args, payload = group.first_send(run)
    else:
        text, args, payload = first[0](group, [item[2] for item in run], False, True)
    return BatchEntry(args, None, True, None, text, run, payload)
