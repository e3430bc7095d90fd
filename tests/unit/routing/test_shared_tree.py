"""Shared subscriptions: group matching, membership, round-robin fairness, pick_excluding."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xmq.routing.shared_tree import SharedGroup, SharedSubscriptions
from xmq.routing.topics import filter_matches

# machines running several suites at once are slow: no per-example deadline
SLOW_OK = [HealthCheck.too_slow]


def _names(groups: list[SharedGroup[str, int]]) -> list[tuple[str, str]]:
    return sorted((group.group, group.topic_filter) for group in groups)


def test_each_matching_group_once() -> None:
    shared: SharedSubscriptions[str, int] = SharedSubscriptions()
    shared.add("g1", "a/+", "m1", 1)
    shared.add("g1", "a/+", "m2", 2)
    shared.add("g2", "a/+", "m1", 1)
    shared.add("g1", "a/#", "m3", 3)
    shared.add("g1", "b", "m4", 4)
    assert _names(shared.match("a/x")) == [("g1", "a/#"), ("g1", "a/+"), ("g2", "a/+")]
    assert _names(shared.match("b")) == [("g1", "b")]
    assert shared.match("c") == []
    assert len(shared) == 5
    assert shared.group_count == 4


@pytest.mark.parametrize(
    ("flt", "topic", "expected"),
    [("#", "$SYS/x", False), ("+/x", "$SYS/x", False), ("$SYS/#", "$SYS/x", True)],
    ids=["hash_skips_sys", "plus_skips_sys", "sys_hash_matches"],
)
def test_dollar_topics(flt: str, topic: str, expected: bool) -> None:
    shared: SharedSubscriptions[str, int] = SharedSubscriptions()
    shared.add("g", flt, "m", 0)
    assert bool(shared.match(topic)) is expected


def test_add_replace_remove() -> None:
    shared: SharedSubscriptions[str, int] = SharedSubscriptions()
    assert shared.add("g", "t", "m1", 1) is None
    assert shared.add("g", "t", "m1", 5) == 1
    assert len(shared) == 1
    group = shared.get_group("g", "t")
    assert group is not None
    assert dict(group.members) == {"m1": 5}
    assert group.get("m1") == 5
    assert shared.remove("g", "t", "m2") is None
    assert shared.remove("h", "t", "m1") is None
    assert shared.remove("g", "u", "m1") is None
    assert shared.remove("g", "t", "m1") == 5
    assert len(shared) == 0
    assert shared.group_count == 0
    assert shared.get_group("g", "t") is None
    assert shared._trie.is_empty()


def test_cache_invalidated_when_groups_appear_and_vanish() -> None:
    shared: SharedSubscriptions[str, int] = SharedSubscriptions()
    assert shared.match("a/b") == []
    shared.add("g", "a/+", "m1", 1)
    assert _names(shared.match("a/b")) == [("g", "a/+")]
    shared.add("h", "a/b", "m2", 2)
    assert _names(shared.match("a/b")) == [("g", "a/+"), ("h", "a/b")]
    shared.remove("g", "a/+", "m1")
    assert _names(shared.match("a/b")) == [("h", "a/b")]
    shared.remove("h", "a/b", "m2")
    assert shared.match("a/b") == []


def test_member_changes_keep_cached_group_live() -> None:
    shared: SharedSubscriptions[str, int] = SharedSubscriptions()
    shared.add("g", "a/+", "m1", 1)
    cached = shared.match("a/b")
    shared.add("g", "a/+", "m2", 2)
    assert shared.match("a/b") is cached
    assert set(cached[0].members) == {"m1", "m2"}


def test_groups_of_and_groups() -> None:
    shared: SharedSubscriptions[str, int] = SharedSubscriptions()
    shared.add("g1", "a", "m1", 1)
    shared.add("g2", "b/#", "m1", 1)
    shared.add("g2", "b/#", "m2", 2)
    assert _names(shared.groups_of("m1")) == [("g1", "a"), ("g2", "b/#")]
    assert _names(shared.groups_of("m2")) == [("g2", "b/#")]
    assert shared.groups_of("nobody") == []
    assert _names(list(shared.groups())) == [("g1", "a"), ("g2", "b/#")]
    shared.remove("g1", "a", "m1")
    assert _names(shared.groups_of("m1")) == [("g2", "b/#")]
    shared.remove("g2", "b/#", "m1")
    assert shared.groups_of("m1") == []


@pytest.mark.parametrize("members", [1, 2, 3, 7], ids=["one", "two", "three", "seven"])
def test_round_robin_is_fair(members: int) -> None:
    group: SharedGroup[str, int] = SharedGroup("g", "t")
    for index in range(members):
        group._put(f"m{index}", index)
    picks = [group.pick() for _ in range(members * 10)]
    counts = Counter(pick[0] for pick in picks if pick is not None)
    assert counts == Counter({f"m{index}": 10 for index in range(members)})
    # strictly rotating: consecutive picks differ when there is more than one member
    if members > 1:
        assert all(a != b for a, b in zip(picks, picks[1:], strict=False))


def test_pick_on_empty_group() -> None:
    group: SharedGroup[str, int] = SharedGroup("g", "t")
    assert group.pick() is None
    assert group.pick_excluding(set()) is None


def test_round_robin_stays_fair_when_members_leave_and_join() -> None:
    shared: SharedSubscriptions[str, int] = SharedSubscriptions()
    for name in ("a", "b", "c", "d"):
        shared.add("g", "t", name, 0)
    group = shared.get_group("g", "t")
    assert group is not None
    assert [group.pick() for _ in range(2)] == [("a", 0), ("b", 0)]
    shared.remove("g", "t", "a")  # before the cursor: next is still c
    assert group.pick() == ("c", 0)
    shared.remove("g", "t", "d")  # the next one leaves: wrap to b
    assert group.pick() == ("b", 0)
    shared.add("g", "t", "e", 0)
    assert [group.pick() for _ in range(3)] == [("c", 0), ("e", 0), ("b", 0)]


def test_pick_excluding() -> None:
    group: SharedGroup[str, int] = SharedGroup("g", "t")
    for index, name in enumerate(("a", "b", "c")):
        group._put(name, index)
    assert group.pick_excluding({"a"}) == ("b", 1)
    assert group.pick_excluding({"a"}) == ("c", 2)
    assert group.pick_excluding({"a"}) == ("b", 1)
    assert group.pick_excluding({"a", "b", "c"}) is None
    assert group.pick_excluding({"b", "c"}) == ("a", 0)
    assert group.pick() == ("b", 1)
    assert group.pick_excluding(set()) == ("c", 2)


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW_OK)
@given(
    members=st.lists(st.sampled_from("abcdef"), min_size=1, max_size=6, unique=True),
    excluded=st.sets(st.sampled_from("abcdef")),
    rounds=st.integers(1, 5),
)
def test_pick_excluding_is_fair_over_the_allowed_members(
    members: list[str], excluded: set[str], rounds: int
) -> None:
    group: SharedGroup[str, int] = SharedGroup("g", "t")
    for name in members:
        group._put(name, 0)
    allowed = [name for name in members if name not in excluded]
    picks = [group.pick_excluding(excluded) for _ in range(len(allowed) * rounds)]
    if not allowed:
        assert group.pick_excluding(excluded) is None
        return
    counts = Counter(pick[0] for pick in picks if pick is not None)
    assert counts == Counter({name: rounds for name in allowed})


GROUPS = st.sampled_from(["g1", "g2"])
FILTERS = st.sampled_from(["a", "a/+", "a/#", "#", "+/b", "$SYS/#", "a/b"])
TOPICS = st.sampled_from(["a", "a/b", "x/b", "$SYS/b", "a/b/c"])


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW_OK)
@given(
    operations=st.lists(
        st.tuples(st.booleans(), GROUPS, FILTERS, st.sampled_from(["m1", "m2"])), max_size=40
    ),
    topics=st.lists(TOPICS, min_size=1, max_size=5),
)
def test_shared_match_agrees_with_brute_force(
    operations: list[tuple[bool, str, str, str]], topics: list[str]
) -> None:
    shared: SharedSubscriptions[str, int] = SharedSubscriptions()
    model: set[tuple[str, str, str]] = set()
    for adding, group, flt, key in operations:
        if adding:
            shared.add(group, flt, key, 0)
            model.add((group, flt, key))
        else:
            shared.remove(group, flt, key)
            model.discard((group, flt, key))
        for topic in topics:
            expected = sorted({(g, f) for g, f, _ in model if filter_matches(f, topic)})
            assert _names(shared.match(topic)) == expected
    assert len(shared) == len(model)
