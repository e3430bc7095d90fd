"""The fairness policy of the password-hashing pool, on a virtual clock and a hand-driven
executor (no real threads, no sleeps)."""

from __future__ import annotations

import asyncio
import heapq
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from xmq.auth.hash_pool import HashPool, HashPoolBusyError
from xmq.auth.hash_queue import FairHashQueue


def test_an_address_has_bounded_jobs_running_and_waiting() -> None:
    queue: FairHashQueue[str] = FairHashQueue(per_address=1, queued_per_address=2)
    assert [queue.push("10.0.0.1", f"j{n}") for n in range(4)] == [True, True, True, False]
    assert queue.pop() == ("10.0.0.1", "j0")
    assert queue.pop() is None  # its one running job is the most it gets
    assert queue.push("10.0.0.1", "j4") is False  # 1 running + 2 waiting
    queue.done("10.0.0.1")
    assert queue.pop() == ("10.0.0.1", "j1")
    assert queue.refused == 2


def test_addresses_are_served_round_robin() -> None:
    queue: FairHashQueue[str] = FairHashQueue(per_address=1, queued_per_address=4)
    for address, count in (("a", 3), ("b", 2), ("c", 1)):
        for n in range(count):
            queue.push(address, f"{address}{n}")
    order = []
    while (item := queue.pop()) is not None:
        order.append(item[1])
        queue.done(item[0])
    assert order == ["a0", "b0", "c0", "a1", "b1", "a2"]


def test_addresses_with_failed_logins_come_after_those_without() -> None:
    failures = {"attacker-1": 3.0, "attacker-2": 1.0}
    queue: FairHashQueue[str] = FairHashQueue(lambda a: failures.get(a, 0.0))
    queue.push("attacker-1", "x1")
    queue.push("attacker-2", "x2")
    queue.push("good", "g")
    assert [queue.pop(), queue.pop(), queue.pop()] == [
        ("good", "g"),
        ("attacker-2", "x2"),
        ("attacker-1", "x1"),
    ]


def test_a_job_whose_login_went_away_leaves_the_queue() -> None:
    queue: FairHashQueue[str] = FairHashQueue()
    queue.push("a", "j1")
    assert queue.remove("a", "j1") and not queue.remove("a", "j1")
    assert queue.pop() is None and queue.queued == 0


def simulate(
    ranked: bool, good_known: bool, good_at: float, attackers: int = 60, workers: int = 2
) -> float:
    """A flood on a virtual clock: ``attackers`` addresses each retry a wrong login as soon
    as the last one is answered (each failure counts on its address, as the login guard
    does); a good login arrives at ``good_at`` from an address that logged in before
    (``good_known``) or a new one. Every hash takes 1.0. Returns the good login's time from
    arrival to answer."""
    failures: dict[str, float] = {}

    def rank(address: str) -> float:
        if not ranked:
            return 0.0
        if address == "good" and good_known:
            return -1.0
        return failures.get(address, 0.0)

    queue: FairHashQueue[str] = FairHashQueue(rank, per_address=1, queued_per_address=4)
    events: list[tuple[float, int, str, str]] = []  # (time, seq, kind, address)
    seq = 0

    def at(time: float, kind: str, address: str) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (time, seq, kind, address))

    for n in range(attackers):
        at(0.0, "arrive", f"10.0.0.{n}")
    at(good_at, "arrive", "good")
    busy = 0
    answered = 0.0
    while events:
        now, _, kind, address = heapq.heappop(events)
        if kind == "arrive":
            queue.push(address, address)
        else:  # a hash finished
            busy -= 1
            queue.done(address)
            if address == "good":
                answered = now
                break
            failures[address] = failures.get(address, 0.0) + 1
            at(now, "arrive", address)  # the attacker tries again at once
        while busy < workers and (item := queue.pop()) is not None:
            busy += 1
            at(now + 1.0, "done", item[0])
    return answered - good_at


def test_a_flood_from_many_addresses_does_not_delay_a_good_login() -> None:
    # it waits at most for the hashes already running, then hashes: within 2 hash times
    assert simulate(ranked=True, good_known=True, good_at=10.0) <= 2.0  # during the burst
    assert simulate(ranked=True, good_known=False, good_at=40.0) <= 2.0  # once all failed
    # the limit: a new address in the first burst takes its turn among 60 new addresses
    assert simulate(ranked=True, good_known=False, good_at=10.0) <= 21.0
    # without the ranking, a known address in the burst waits its turn among the newcomers
    assert simulate(ranked=False, good_known=True, good_at=10.0) >= 20.0
    # one shared first-come queue (what the pool replaced): behind every waiting attempt
    assert simulate_fifo(good_at=40.0) >= 25.0


def simulate_fifo(good_at: float, attackers: int = 60, workers: int = 2) -> float:
    """``simulate``'s flood against one first-come, first-served queue."""
    waiting: deque[str] = deque()
    events: list[tuple[float, int, str]] = []
    seq = 0

    def at(time: float, address: str) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (time, seq, address))

    for n in range(attackers):
        waiting.append(f"10.0.0.{n}")
    at(good_at, "+good")
    busy = 0
    now = 0.0
    while True:
        while busy < workers and waiting:
            busy += 1
            at(now + 1.0, waiting.popleft())
        now, _, address = heapq.heappop(events)
        if address == "+good":
            waiting.append("good")
            continue
        busy -= 1
        if address == "good":
            return now - good_at
        waiting.append(address)  # the attacker tries again at once


class HandDriven(Executor):
    """An executor whose jobs run only when the test says so."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.jobs.append((future, fn, args))
        return future

    def run_next(self) -> None:
        future, fn, args = self.jobs.pop(0)
        future.set_result(fn(*args))


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_the_pool_runs_jobs_in_the_queues_order_and_drops_abandoned_ones() -> None:
    async def scenario() -> None:
        executor = HandDriven()
        failures = {"10.0.0.9": 5.0}
        pool = HashPool(lambda a: failures.get(a, 0.0), workers=1, executor=executor)
        first = asyncio.ensure_future(pool.run("10.0.0.1:1000", lambda: "first"))
        await _settle()
        attacker = asyncio.ensure_future(pool.run("10.0.0.9:1000", lambda: "attacker"))
        gone = asyncio.ensure_future(pool.run("10.0.0.3:1000", lambda: "gone"))
        good = asyncio.ensure_future(pool.run("10.0.0.2:1000", lambda: "good"))
        await _settle()
        assert len(executor.jobs) == 1  # one worker
        gone.cancel()
        await _settle()
        executor.run_next()
        await _settle()
        assert first.result() == "first"
        executor.run_next()  # the clean address before the one with failures
        await _settle()
        assert good.result() == "good" and not attacker.done()
        executor.run_next()
        await _settle()
        assert attacker.result() == "attacker"
        assert not executor.jobs and pool.queue.queued == 0  # "gone" never ran
        # one address: 1 hashing + 4 waiting at most, the rest refused at once
        flood = [asyncio.ensure_future(pool.run("10.0.0.5:1", lambda: None)) for _ in range(7)]
        await _settle()
        refused = [t for t in flood if t.done() and isinstance(t.exception(), HashPoolBusyError)]
        assert len(refused) == 2 and len(executor.jobs) == 1
        for task in flood:
            task.cancel()
        await _settle()

    asyncio.run(scenario())
