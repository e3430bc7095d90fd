"""Group commit: every Redis command queued during one loop tick goes out in one pipeline.

Callers queue commands with a callback (or await a future); the first command of a tick
schedules a flush with ``call_soon``. One pipeline is in flight at a time, and everything
queued while it travels forms the next one, so under load many connections' records share
each round trip while each still waits for its own reply.

Durable writes (``retry=True``) are retried, in order, until Redis takes them; look-ups on the
connect path (``retry=False``) fail fast so the CONNECT can be answered 0x88.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, RedisError, ResponseError

log = logging.getLogger("xmq.store.batcher")

Callback = Callable[[Any], None]
Guard = Callable[[], bool]


class _Entry:
    __slots__ = ("args", "callback", "guard", "retry", "script")

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


class RedisBatcher:
    """Pipelines the commands of each loop tick (one pipeline in flight at a time)."""

    def __init__(self, client: aioredis.Redis, timeout_s: float = 2.0) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self._pending: list[_Entry] = []
        self._task: asyncio.Task[None] | None = None
        self._armed = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._shas: dict[str, str] = {}
        self.pipelines = 0
        self.commands = 0
        self.failures = 0

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

    def call_script(self, text: str, keys: tuple[Any, ...], args: tuple[Any, ...]) -> Any:
        """Queue a script and return a future of its reply (not retried)."""
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
        if self._task is None and not self._armed:
            self._armed = True
            asyncio.get_running_loop().call_soon(self._start)

    def _start(self) -> None:
        self._armed = False
        if self._task is None and self._pending:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="redis-batch")

    @property
    def backlog(self) -> int:
        return len(self._pending)

    async def flush(self) -> None:
        """Wait until everything queued so far has been written (or given up)."""
        await self._idle.wait()

    # -- the writer -------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                await self._send(batch)
        finally:
            self._task = None
            if self._pending:
                self._armed = True
                asyncio.get_running_loop().call_soon(self._start)
            else:
                self._idle.set()

    async def _send(self, batch: list[_Entry]) -> None:
        while batch:
            live = [entry for entry in batch if entry.guard is None or entry.guard()]
            if not live:
                return
            try:
                async with asyncio.timeout(self.timeout_s):
                    pipe = self.client.pipeline(transaction=False)
                    for entry in live:
                        pipe.execute_command(*entry.args)
                    replies = await pipe.execute(raise_on_error=False)
            except (RedisError, OSError, TimeoutError) as error:
                self.failures += 1
                if self.failures % 50 == 1:
                    log.warning("redis pipeline of %d failed: %s", len(live), error)
                for entry in live:
                    if not entry.retry and entry.callback is not None:
                        entry.callback(error)
                batch = [entry for entry in live if entry.retry]
                if batch:
                    await asyncio.sleep(0.2)
                continue
            self.pipelines += 1
            self.commands += len(live)
            again: list[_Entry] = []
            for entry, reply in zip(live, replies, strict=True):
                if isinstance(reply, NoScriptError) or (
                    isinstance(reply, ResponseError) and str(reply).startswith("NOSCRIPT")
                ):
                    assert entry.script is not None
                    entry.args = ("EVAL", entry.script, *entry.args[2:])
                    again.append(entry)
                    continue
                if isinstance(reply, ResponseError):
                    log.error("redis command %s failed: %s", entry.args[0], reply)
                if entry.callback is not None:
                    entry.callback(reply)
            batch = again
