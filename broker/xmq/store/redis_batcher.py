"""Group commit: the Redis commands queued while a batch is out go together in the next one.

Callers queue commands with a callback (or await a future). With nothing waiting for Redis,
the first command of a tick schedules a flush with ``call_soon``: an idle node pays one round
trip, no timer. While a batch is out, commands queue up, and the batch's last reply schedules
the next flush (Nagle's rule, for pipelines): at most one batch in flight, so the batch size
follows the load by itself — many connections' records share each round trip and each
``write``/reply event while each caller still waits for its own reply. Replies call back in
order on the node's :class:`RespConnection`.

Durable writes (``retry=True``) survive a lost connection: they are re-sent, in order, once
the connection is back (a write that reached Redis just before the loss may then be applied
twice — at-least-once). Look-ups on the connect path (``retry=False``) fail at once so the
CONNECT can be answered 0x88.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from typing import Any

from xmq.store.resp_connection import (
    RedisConnectionLost,
    RedisReplyError,
    RespConnection,
    encode_command,
)

log = logging.getLogger("xmq.store.batcher")

Callback = Callable[[Any], None]
Guard = Callable[[], bool]


class _Entry:
    __slots__ = ("args", "callback", "guard", "payload", "retry", "script")

    def __init__(
        self,
        args: tuple[Any, ...],
        callback: Callback | None,
        retry: bool,
        guard: Guard | None,
        script: str | None,
    ) -> None:
        self.args = args
        self.callback = callback
        self.retry = retry
        self.guard = guard
        self.script = script  # the full text, for EVAL after a NOSCRIPT reply
        self.payload = encode_command(args)


class RedisBatcher:
    """Pipelines the commands of each loop tick on one Redis connection."""

    def __init__(self, url: str, timeout_s: float = 2.0) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._conn: RespConnection | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._pending: list[_Entry] = []
        self._inflight = 0
        self._armed = False
        self._closed = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._shas: dict[str, str] = {}
        self.pipelines = 0
        self.commands = 0
        self.failures = 0
        self.resent = 0  # commands queued again after a NOSCRIPT reply or a lost connection

    async def start(self) -> None:
        """Connect (raises when Redis does not answer)."""
        self._conn = await RespConnection.open(self.url, self.timeout_s)
        self._watch(self._conn)

    async def close(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        if self._conn is not None:
            self._conn.close()

    # -- queueing ---------------------------------------------------------------------------

    def command(
        self,
        *args: Any,
        callback: Callback | None = None,
        retry: bool = True,
        guard: Guard | None = None,
    ) -> None:
        """Queue one command; ``callback`` gets its reply (or the exception when not retried)."""
        self._add(_Entry(args, callback, retry, guard, None))

    def script(
        self,
        text: str,
        keys: tuple[Any, ...],
        args: tuple[Any, ...],
        callback: Callback | None = None,
        retry: bool = True,
        guard: Guard | None = None,
    ) -> None:
        """Queue an ``EVALSHA`` (falls back to ``EVAL`` when Redis lost the script)."""
        sha = self._shas.get(text)
        if sha is None:
            sha = hashlib.sha1(text.encode()).hexdigest()  # noqa: S324 - Redis's script id
            self._shas[text] = sha
        self._add(_Entry(("EVALSHA", sha, len(keys), *keys, *args), callback, retry, guard, text))

    def call_script(
        self, text: str, keys: tuple[Any, ...], args: tuple[Any, ...]
    ) -> asyncio.Future[Any]:
        """Queue a script and return a future of its reply (not retried; errors raised)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def done(reply: Any) -> None:
            if future.done():
                return
            if isinstance(reply, BaseException):
                future.set_exception(reply)
            else:
                future.set_result(reply)

        self.script(text, keys, args, callback=done, retry=False)
        return future

    def _add(self, entry: _Entry) -> None:
        self._pending.append(entry)
        self._idle.clear()
        if not self._armed and not self._inflight:
            self._arm()

    def _arm(self) -> None:
        self._armed = True
        asyncio.get_running_loop().call_soon(self._flush)

    @property
    def idle(self) -> bool:
        """Nothing queued or waiting for a reply."""
        return self._idle.is_set()

    @property
    def backlog(self) -> int:
        return len(self._pending) + self._inflight

    async def flush(self) -> None:
        """Wait until everything queued so far has been answered (later commands may not be).

        A ``PING`` queued behind them is answered after them (replies come in order), so this
        returns under continuous load too; a command re-sent meanwhile (a lost script, a lost
        connection) went behind that ``PING``, so another one follows it.
        """
        while not self._idle.is_set():
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
        if not self._pending:
            self._check_idle()
            return
        conn = self._conn
        if conn is None or conn.transport is None or conn.transport.is_closing():
            self._fail_fast(RedisConnectionLost("redis not connected"))
            self._reconnect()
            return
        batch, self._pending = self._pending, []
        parts: list[bytes] = []
        callbacks: list[Callback] = []
        for entry in batch:
            if entry.guard is not None and not entry.guard():
                continue
            parts.append(entry.payload)
            callbacks.append(self._reply_for(entry))
        if not parts:
            self._check_idle()
            return
        self._inflight += len(parts)
        self.pipelines += 1
        self.commands += len(parts)
        conn.send(b"".join(parts), callbacks)

    def _reply_for(self, entry: _Entry) -> Callback:
        def reply(value: Any) -> None:
            self._inflight -= 1
            if isinstance(value, RedisConnectionLost):
                self.failures += 1
                if entry.retry:
                    self.resent += 1
                    self._add(entry)
                elif entry.callback is not None:
                    entry.callback(value)
            elif isinstance(value, RedisReplyError) and str(value).startswith("NOSCRIPT"):
                assert entry.script is not None
                entry.args = ("EVAL", entry.script, *entry.args[2:])
                entry.payload = encode_command(entry.args)
                self.resent += 1
                self._add(entry)
            else:
                if isinstance(value, RedisReplyError):
                    log.error("redis %s failed: %s", entry.args[0], value)
                if entry.callback is not None:
                    try:
                        entry.callback(value)
                    except Exception:
                        log.exception("redis reply callback failed")
            if not self._inflight and self._pending and not self._armed:
                self._arm()  # the batch is answered: what queued meanwhile goes now
            self._check_idle()

        return reply

    def _check_idle(self) -> None:
        if not self._pending and not self._inflight:
            self._idle.set()

    def _fail_fast(self, error: Exception) -> None:
        """Without a connection, connect-path look-ups fail now; durable writes wait."""
        kept: list[_Entry] = []
        for entry in self._pending:
            if entry.retry:
                kept.append(entry)
            elif entry.callback is not None:
                entry.callback(error)
        self._pending = kept
        self._check_idle()

    def _watch(self, conn: RespConnection) -> None:
        def lost(_: asyncio.Future[None]) -> None:
            if self._conn is conn:
                self._conn = None
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
        try:
            while not self._closed:
                try:
                    conn = await RespConnection.open(self.url, self.timeout_s)
                except (OSError, TimeoutError, RedisReplyError) as error:
                    self.failures += 1
                    if self.failures % 50 == 1:
                        log.warning("redis connection failed: %s", error)
                    await asyncio.sleep(0.2)
                    continue
                self._conn = conn
                self._watch(conn)
                if self._pending and not self._armed:
                    self._arm()
                return
        finally:
            self._connecting = None
