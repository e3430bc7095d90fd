"""The store's memory of recent (client id, forward id) pairs: bounded, oldest out, cheap."""

from __future__ import annotations

import gc
import tracemalloc
from collections import deque

from xmq.store.forwarded_marks import MAX_AGE_S, RECENT_FORWARDED, ForwardedMarks


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_pair_is_remembered_once_and_forgotten_on_discard() -> None:
    marks = ForwardedMarks(_Clock())
    assert marks.add(("s1", "a-0/1/1"))
    assert not marks.add(("s1", "a-0/1/1"))  # the duplicate
    assert marks.add(("s2", "a-0/1/1")) and marks.add(("s3", "a-0/1/1"))
    assert ("s2", "a-0/1/1") in marks and ("s4", "a-0/1/1") not in marks
    assert ("s1", "a-0/1/2") not in marks
    marks.discard(("s2", "a-0/1/1"))  # its record failed: it may come again
    marks.discard(("s9", "a-0/1/1"))  # never held: nothing happens
    assert ("s2", "a-0/1/1") not in marks and marks.count == 2
    assert marks.add(("s2", "a-0/1/1"))
    marks.discard(("s1", "a-0/1/9"))
    assert marks.count == 3


def test_the_pairs_are_bounded_the_oldest_forward_ids_out_first() -> None:
    marks = ForwardedMarks(_Clock(), limit=1000)
    for message in range(30):  # a fan-out of 100 sessions per message
        for session in range(100):
            marks.add((f"s{session}", f"a-0/1/{message}"))
        assert marks.count <= 1000
    assert marks.count == 1000
    # the latest 10 messages are held in full, the older ones are forgotten
    assert all((f"s{s}", f"a-0/1/{m}") in marks for m in range(20, 30) for s in range(100))
    assert not any((f"s{s}", f"a-0/1/{m}") in marks for m in range(20) for s in range(100))
    for n in range(5000):  # point to point: one session per message
        marks.add(("p", f"b-0/1/{n}"))
    assert marks.count == 1000
    assert ("p", "b-0/1/4999") in marks and ("p", "b-0/1/3999") not in marks


def test_a_discarded_single_pair_does_not_break_the_count() -> None:
    marks = ForwardedMarks(_Clock(), limit=3)
    marks.add(("s", "f1"))
    marks.discard(("s", "f1"))
    marks.add(("s", "f1"))  # its forward id is twice in the order now
    marks.add(("s", "f2"))
    marks.add(("s", "f3"))
    marks.add(("s", "f4"))
    assert marks.count == 3 and ("s", "f4") in marks


def test_pairs_older_than_the_seen_markers_are_forgotten() -> None:
    clock = _Clock()
    marks = ForwardedMarks(clock)
    for n in range(100):
        marks.add((f"s{n}", "a-0/1/old"))
    clock.now += MAX_AGE_S / 2
    marks.add(("s0", "a-0/1/newer"))
    clock.now += MAX_AGE_S / 2 - 0.5
    marks.add(("s0", "a-0/1/new"))
    assert ("s99", "a-0/1/old") in marks  # not yet its age: never forgotten early
    clock.now += 1.0
    marks.add(("s0", "a-0/1/newest"))
    assert ("s99", "a-0/1/old") not in marks and marks.count == 3
    assert ("s0", "a-0/1/newer") in marks and ("s0", "a-0/1/new") in marks


def _bytes_per_pair(build: object, pairs: int) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()  # type: ignore[operator]
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del kept
    return (after - before) / pairs


def test_a_point_to_point_pair_costs_half_a_tuple_in_a_set_and_a_deque() -> None:
    forward_ids = [f"a-0/7/{n}" for n in range(RECENT_FORWARDED)]  # the messages' own ids

    def marks() -> ForwardedMarks:
        held = ForwardedMarks(_Clock())
        for forward_id in forward_ids:
            held.add(("device-000001", forward_id))
        return held

    def tuples() -> tuple[set[tuple[str, str]], deque[tuple[str, str]]]:
        held: set[tuple[str, str]] = set()
        order: deque[tuple[str, str]] = deque()
        for forward_id in forward_ids:
            mark = ("device-000001", forward_id)
            held.add(mark)
            order.append(mark)
        return held, order

    grouped = _bytes_per_pair(marks, len(forward_ids))
    before = _bytes_per_pair(tuples, len(forward_ids))
    assert grouped * 2 < before, (grouped, before)


def test_a_fan_out_pair_costs_a_third_of_a_tuple_in_a_set_and_a_deque() -> None:
    sessions = [f"device-{n:06d}" for n in range(20_000)]  # the sessions' own strings
    forward_ids = ["a-0/7/1", "a-0/7/2", "a-0/7/3"]

    def marks() -> ForwardedMarks:
        held = ForwardedMarks(_Clock())
        for forward_id in forward_ids:
            for client_id in sessions:
                held.add((client_id, forward_id))
        return held

    def tuples() -> tuple[set[tuple[str, str]], deque[tuple[str, str]]]:
        held: set[tuple[str, str]] = set()
        order: deque[tuple[str, str]] = deque()
        for forward_id in forward_ids:
            for client_id in sessions:
                mark = (client_id, forward_id)
                held.add(mark)
                order.append(mark)
        return held, order

    pairs = len(sessions) * len(forward_ids)
    grouped = _bytes_per_pair(marks, pairs)
    before = _bytes_per_pair(tuples, pairs)
    assert grouped * 3 < before, (grouped, before)
    assert RECENT_FORWARDED * grouped < 4 << 20  # the count bound costs under 4 MiB
