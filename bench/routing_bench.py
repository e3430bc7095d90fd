"""Micro-benchmarks of routing (plain perf_counter loops, ns per op).

Shapes:
- fan-out: one topic with 1,000 subscribers on it (literal filter; and a mixed variant where
  they are spread over `t/x/y`, `t/+/y`, `t/#`, `+/x/#`), plus background filters elsewhere;
- point-to-point: 2,000 distinct topics, one subscriber each, published to in turn;
each matched through the per-topic cache and without it (`cache_size=0`). Also: topic-name
validation, shared-group match + pick, retained look-ups by filter.

Run: .venv/bin/python bench/routing_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import NamedTuple

from xmq.routing.filter_trie import DEFAULT_CACHE_SIZE
from xmq.routing.retained import RetainedStore
from xmq.routing.shared_tree import SharedSubscriptions
from xmq.routing.subscription_tree import SubscriptionTree
from xmq.routing.topics import validate_topic_filter, validate_topic_name

FANOUT_TOPIC = "bench/fanout/topic"
FANOUT_SUBSCRIBERS = 1000
P2P_PAIRS = 2000
BACKGROUND_FILTERS = 2000


class Timing(NamedTuple):
    """Best ns per op over the repeats: wall clock (perf_counter) and process CPU time.

    On a shared, loaded machine the CPU column is the steadier one.
    """

    wall: float
    cpu: float

    def per(self, count: int) -> Timing:
        return Timing(self.wall / count, self.cpu / count)


def _best_ns_per_op(run: Callable[[], int], repeats: int) -> Timing:
    """Run ``run`` (which returns how many ops it did) ``repeats`` times; best ns per op."""
    best_wall = best_cpu = float("inf")
    for _ in range(repeats):
        cpu_start = time.process_time_ns()
        start = time.perf_counter_ns()
        ops = run()
        wall = time.perf_counter_ns() - start
        cpu = time.process_time_ns() - cpu_start
        best_wall = min(best_wall, wall / ops)
        best_cpu = min(best_cpu, cpu / ops)
    return Timing(best_wall, best_cpu)


def _with_background(tree: SubscriptionTree[str, int]) -> None:
    """Unrelated subscriptions, so the trie is not trivially small."""
    for index in range(BACKGROUND_FILTERS):
        tree.add(f"devices/{index}/state", f"bg{index}", 0)
        if index % 10 == 0:
            tree.add(f"devices/{index}/+", f"bgw{index}", 0)


def _match_loop(
    tree: SubscriptionTree[str, int], topics: list[str], rounds: int
) -> Callable[[], int]:
    def run() -> int:
        match = tree.match
        for _ in range(rounds):
            for topic in topics:
                match(topic)
        return rounds * len(topics)

    return run


def bench_fanout(cache_size: int, mixed: bool, rounds: int, repeats: int) -> Timing:
    tree: SubscriptionTree[str, int] = SubscriptionTree(cache_size)
    _with_background(tree)
    filters = (
        ["bench/fanout/topic", "bench/+/topic", "bench/#", "+/fanout/#"]
        if mixed
        else [FANOUT_TOPIC]
    )
    for index in range(FANOUT_SUBSCRIBERS):
        tree.add(filters[index % len(filters)], f"client{index}", 1)
    assert len(tree.match(FANOUT_TOPIC)) == FANOUT_SUBSCRIBERS
    return _best_ns_per_op(_match_loop(tree, [FANOUT_TOPIC], rounds), repeats)


def bench_p2p(cache_size: int, rounds: int, repeats: int) -> Timing:
    tree: SubscriptionTree[str, int] = SubscriptionTree(cache_size)
    _with_background(tree)
    topics = [f"p2p/{index}/in" for index in range(P2P_PAIRS)]
    for index, topic in enumerate(topics):
        tree.add(topic, f"receiver{index}", 1)
    assert all(len(tree.match(topic)) == 1 for topic in topics)
    return _best_ns_per_op(_match_loop(tree, topics, rounds), repeats)


def bench_validate_topic_name(rounds: int, repeats: int) -> Timing:
    topics = [f"p2p/{index}/in" for index in range(P2P_PAIRS)]

    def run() -> int:
        validate = validate_topic_name
        for _ in range(rounds):
            for topic in topics:
                validate(topic)
        return rounds * len(topics)

    return _best_ns_per_op(run, repeats)


def bench_validate_wildcard_filter(rounds: int, repeats: int) -> Timing:
    filters = [f"p2p/+/{index}/#" for index in range(P2P_PAIRS)]

    def run() -> int:
        validate = validate_topic_filter
        for _ in range(rounds):
            for flt in filters:
                validate(flt)
        return rounds * len(filters)

    return _best_ns_per_op(run, repeats)


def bench_shared(cache_size: int, rounds: int, repeats: int) -> Timing:
    """Match one topic against 10 groups of 100 members each and pick one member per group."""
    shared: SharedSubscriptions[str, int] = SharedSubscriptions(cache_size)
    for group in range(10):
        flt = FANOUT_TOPIC if group % 2 else "bench/+/topic"
        for member in range(100):
            shared.add(f"g{group}", flt, f"m{member}", 1)

    def run() -> int:
        match = shared.match
        for _ in range(rounds):
            for group in match(FANOUT_TOPIC):
                group.pick()
        return rounds

    return _best_ns_per_op(run, repeats)


def bench_retained(flt: str, rounds: int, repeats: int) -> tuple[Timing, int]:
    """Look up `flt` in a store of 10,000 retained topics (sensors/<n>/{temp,hum})."""
    store: RetainedStore[bytes] = RetainedStore()
    for index in range(5000):
        store.set(f"sensors/{index}/temp", b"21.5")
        store.set(f"sensors/{index}/hum", b"40")
    found = len(store.match(flt))

    def run() -> int:
        match = store.match
        for _ in range(rounds):
            match(flt)
        return rounds

    return _best_ns_per_op(run, repeats), found


def bench_calibration(rounds: int, repeats: int) -> Timing:
    """A bare `dict.get` in the same loop shape: the machine's floor for one cached lookup."""
    topics = [f"p2p/{index}/in" for index in range(P2P_PAIRS)]
    table: dict[str, list[int]] = {topic: [] for topic in topics}

    def run() -> int:
        get = table.get
        for _ in range(rounds):
            for topic in topics:
                get(topic)
        return rounds * len(topics)

    return _best_ns_per_op(run, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (smoke run)")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    repeats = 3 if args.quick else 7

    rows: list[tuple[str, Timing, str]] = [
        ("calibration: bare dict.get (floor)", bench_calibration(200 // scale, repeats), "op")
    ]
    for cache_size, label in ((DEFAULT_CACHE_SIZE, "cached"), (0, "uncached")):
        fanout = bench_fanout(cache_size, False, 20000 // scale, repeats)
        rows.append((f"fan-out 1,000 subs, literal filter, {label}", fanout, "publish"))
        rows.append(("  same", fanout.per(FANOUT_SUBSCRIBERS), "delivery"))
        mixed = bench_fanout(cache_size, True, 20000 // scale, repeats)
        rows.append((f"fan-out 1,000 subs, 4 wildcard filters, {label}", mixed, "publish"))
        rows.append(("  same", mixed.per(FANOUT_SUBSCRIBERS), "delivery"))
        p2p = bench_p2p(cache_size, 200 // scale, repeats)
        rows.append((f"p2p 2,000 topics x 1 sub, {label}", p2p, "publish"))
        if cache_size:
            thrash = bench_p2p(P2P_PAIRS // 2, 200 // scale, repeats)
            rows.append(("p2p 2,000 topics, cache of 1,000 (thrash)", thrash, "publish"))
        shared = bench_shared(cache_size, 100000 // scale, repeats)
        rows.append((f"shared match + pick, 10 groups x 100, {label}", shared, "publish"))
    rows.append(("validate_topic_name", bench_validate_topic_name(200 // scale, repeats), "call"))
    rows.append(
        (
            "validate_topic_filter (wildcards)",
            bench_validate_wildcard_filter(200 // scale, repeats),
            "call",
        )
    )
    for flt, rounds in (
        ("sensors/42/temp", 100000),
        ("sensors/4999/+", 100000),
        ("sensors/+/temp", 20),
        ("sensors/#", 20),
    ):
        timing, found = bench_retained(flt, max(1, rounds // scale), repeats)
        rows.append((f"retained match {flt!r} ({found} of 10,000)", timing, "lookup"))

    width = max(len(name) for name, _, _ in rows)
    print(f"{'routing benchmark':<{width}}  {'wall ns':>12}  {'cpu ns':>12}  per")
    for name, timing, unit in rows:
        print(f"{name:<{width}}  {timing.wall:>12,.1f}  {timing.cpu:>12,.1f}  {unit}")


if __name__ == "__main__":
    main()
