"""Slow password hashes off the event loop, on a few threads, fair between source addresses.

``HashPool.run`` queues one hash for a login's source address and waits for its result; the
order is ``FairHashQueue``'s (per-address bounds, addresses with failed logins after those
without, round-robin among equals). ``workers`` threads hash at once (hashlib releases the
GIL: one per core is the most that helps). A login that goes away (its connection closed, the
connect deadline) before its hash ran takes it out of the queue.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, TypeVar

from xmq.auth.hash_queue import FairHashQueue
from xmq.auth.login_guard import peer_address

T = TypeVar("T")


class HashPoolBusyError(Exception):
    """Too many logins of one source address (or in all) are waiting for a hash."""


class _Job:
    __slots__ = ("args", "fn", "future")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], future: asyncio.Future[Any]):
        self.fn = fn
        self.args = args
        self.future = future


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


class HashPool:
    """Runs slow hashes in the order of a :class:`FairHashQueue`."""

    def __init__(
        self,
        rank: Callable[[str], float] = lambda address: 0.0,
        *,
        workers: int | None = None,
        per_address: int = 1,
        queued_per_address: int = 4,
        executor: Executor | None = None,
    ) -> None:
        self.workers = workers or default_workers()
        self.queue: FairHashQueue[_Job] = FairHashQueue(rank, per_address, queued_per_address)
        self._executor = executor
        self._busy = 0

    async def run(self, peer: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a hashing thread in the fair order of ``peer``'s address; raises
        :class:`HashPoolBusyError` when the address (or the pool) has too many waiting."""
        address = peer_address(peer)
        loop = asyncio.get_running_loop()
        job = _Job(fn, args, loop.create_future())
        if not self.queue.push(address, job):
            raise HashPoolBusyError(f"too many logins waiting from {address}")
        self._start(loop)
        try:
            result: T = await job.future
        except asyncio.CancelledError:
            self.queue.remove(address, job)  # not run yet: it never will
            raise
        return result

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        while self._busy < self.workers:
            item = self.queue.pop()
            if item is None:
                return
            address, job = item
            if job.future.done():  # its login went away
                self.queue.done(address)
                continue
            executor = self._executor
            if executor is None:
                executor = self._executor = ThreadPoolExecutor(
                    self.workers, thread_name_prefix="xmq-hash"
                )
            self._busy += 1
            running = executor.submit(job.fn, *job.args)

            def finished(done: Future[Any], address: str = address, job: _Job = job) -> None:
                loop.call_soon_threadsafe(self._finished, loop, address, job, done)

            running.add_done_callback(finished)

    def _finished(
        self, loop: asyncio.AbstractEventLoop, address: str, job: _Job, done: Future[Any]
    ) -> None:
        self._busy -= 1
        self.queue.done(address)
        if not job.future.done():
            error = done.exception()
            if error is not None:
                job.future.set_exception(error)
            else:
                job.future.set_result(done.result())
        self._start(loop)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
