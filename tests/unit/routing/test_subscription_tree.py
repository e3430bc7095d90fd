"""SubscriptionTree: wildcard matching, add/replace/remove, overlap, cache invalidation."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xmq.routing.subscription_tree import SubscriptionTree
from xmq.routing.topics import filter_matches

CACHE_MODES = [4096, 0, 1]
CACHE_IDS = ["cached", "uncached", "cache_of_one"]

# machines running several suites at once are slow: no per-example deadline
SLOW_OK = [HealthCheck.too_slow]


def _keys(tree: SubscriptionTree[str, int], topic: str) -> Counter[str]:
    return Counter(key for key, _ in tree.match(topic))


SPEC_CASES = [
    ("hash_parent", "sport/tennis/player1/#", "sport/tennis/player1", True),
    ("hash_child", "sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("hash_deep", "sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("hash_alone", "#", "a/b/c", True),
    ("plus_one_level", "sport/+", "sport/tennis", True),
    ("plus_not_across_levels", "sport/+", "sport/tennis/player1", False),
    ("plus_not_parent", "sport/+", "sport", False),
    ("plus_plus_leading_slash", "+/+", "/finance", True),
    ("plus_alone_leading_slash", "+", "/finance", False),
    ("plus_empty_level", "a/+/c", "a//c", True),
    ("sys_not_by_hash", "#", "$SYS/x", False),
    ("sys_not_by_plus", "+/x", "$SYS/x", False),
    ("sys_by_sys_hash", "$SYS/#", "$SYS/x", True),
    ("sys_hash_parent", "$SYS/#", "$SYS", True),
    ("sys_literal", "$SYS/x", "$SYS/x", True),
    ("dollar_deeper_level_ok", "a/+", "a/$SYS", True),
    ("literal_not_prefix", "a/b", "a/b/c", False),
]


@pytest.mark.parametrize("cache_size", CACHE_MODES, ids=CACHE_IDS)
@pytest.mark.parametrize(
    ("flt", "topic", "expected"),
    [(f, t, e) for _, f, t, e in SPEC_CASES],
    ids=[i for i, _, _, _ in SPEC_CASES],
)
def test_spec_examples(flt: str, topic: str, expected: bool, cache_size: int) -> None:
    tree: SubscriptionTree[str, int] = SubscriptionTree(cache_size)
    tree.add(flt, "c1", 1)
    assert tree.match(topic) == ([("c1", 1)] if expected else [])
    assert tree.match(topic) == ([("c1", 1)] if expected else [])  # again, maybe from cache


def test_overlapping_filters_of_one_key_appear_once_per_filter() -> None:
    tree: SubscriptionTree[str, str] = SubscriptionTree()
    tree.add("a/b", "c1", "exact")
    tree.add("a/+", "c1", "plus")
    tree.add("a/#", "c1", "hash")
    tree.add("#", "c1", "all")
    tree.add("a/c", "c1", "other")
    tree.add("a/+", "c2", "plus2")
    assert sorted(tree.match("a/b")) == sorted(
        [("c1", "exact"), ("c1", "plus"), ("c1", "hash"), ("c1", "all"), ("c2", "plus2")]
    )
    assert len(tree) == 6


def test_add_returns_previous_value_and_replaces() -> None:
    tree: SubscriptionTree[str, int] = SubscriptionTree()
    assert tree.add("a/+", "c1", 1) is None
    assert tree.match("a/x") == [("c1", 1)]
    assert tree.add("a/+", "c1", 2) == 1
    assert len(tree) == 1
    assert tree.match("a/x") == [("c1", 2)]
    assert tree.get("a/+", "c1") == 2
    assert tree.get("a/+", "c2") is None
    assert tree.get("a/b", "c1") is None


def test_remove_returns_value_and_prunes() -> None:
    tree: SubscriptionTree[str, int] = SubscriptionTree()
    tree.add("a/b/c", "c1", 1)
    tree.add("a/b/c", "c2", 2)
    tree.add("a/#", "c1", 3)
    assert tree.remove("a/b/c", "c3") is None
    assert tree.remove("a/b/x", "c1") is None
    assert tree.remove("a/+", "c1") is None
    assert tree.remove("a/b/c", "c1") == 1
    assert tree.remove("a/b/c", "c1") is None
    assert len(tree) == 2
    assert sorted(tree.match("a/b/c")) == [("c1", 3), ("c2", 2)]
    assert tree.remove("a/b/c", "c2") == 2
    assert tree.remove("a/#", "c1") == 3
    assert len(tree) == 0
    assert not tree
    assert list(tree.filters()) == []
    assert tree._trie.is_empty()


def test_filters_and_items() -> None:
    tree: SubscriptionTree[str, int] = SubscriptionTree()
    for flt, key in [("a/b", "c1"), ("a/b", "c2"), ("a/+", "c1"), ("#", "c3"), ("/x", "c4")]:
        tree.add(flt, key, 0)
    assert sorted(tree.filters()) == sorted(["a/b", "a/+", "#", "/x"])
    assert sorted(tree.items()) == sorted(
        [("a/b", "c1", 0), ("a/b", "c2", 0), ("a/+", "c1", 0), ("#", "c3", 0), ("/x", "c4", 0)]
    )


@pytest.mark.parametrize(
    "flt", ["a/b", "a/+", "#", "+/b", "a/#"], ids=["literal", "plus", "hash", "lead_plus", "tail"]
)
def test_subscribe_after_cached_match_shows_up(flt: str) -> None:
    tree: SubscriptionTree[str, int] = SubscriptionTree()
    tree.add("a/b", "c0", 0)
    assert _keys(tree, "a/b") == Counter({"c0": 1})
    assert tree.cached_topics == 1
    tree.add(flt, "c1", 1)
    assert _keys(tree, "a/b") == Counter({"c0": 1, "c1": 1})


@pytest.mark.parametrize(
    "flt", ["a/b", "a/+", "#", "+/b", "a/#"], ids=["literal", "plus", "hash", "lead_plus", "tail"]
)
def test_unsubscribe_after_cached_match_disappears(flt: str) -> None:
    tree: SubscriptionTree[str, int] = SubscriptionTree()
    tree.add("a/b", "c0", 0)
    tree.add(flt, "c1", 1)
    assert _keys(tree, "a/b")["c1"] == 1
    tree.remove(flt, "c1")
    assert _keys(tree, "a/b") == Counter({"c0": 1})


def test_replace_after_cached_match_shows_new_value() -> None:
    tree: SubscriptionTree[str, int] = SubscriptionTree()
    tree.add("a/b", "c1", 1)
    assert tree.match("a/b") == [("c1", 1)]
    tree.add("a/b", "c1", 2)
    assert tree.match("a/b") == [("c1", 2)]


def test_empty_results_are_cached_and_invalidated() -> None:
    tree: SubscriptionTree[str, int] = SubscriptionTree()
    assert tree.match("nobody/here") == []
    assert tree.cached_topics == 1
    tree.add("nobody/+", "c1", 1)
    assert tree.match("nobody/here") == [("c1", 1)]


def test_literal_change_keeps_other_cached_topics() -> None:
    tree: SubscriptionTree[str, int] = SubscriptionTree()
    tree.add("p/1", "c1", 1)
    tree.add("p/2", "c2", 2)
    first = tree.match("p/1")
    tree.match("p/2")
    tree.add("p/3", "c3", 3)
    assert tree.cached_topics == 2
    assert tree.match("p/1") is first
    tree.add("p/+", "c4", 4)
    assert tree.cached_topics == 0


def test_cache_is_bounded_by_topics() -> None:
    tree: SubscriptionTree[str, int] = SubscriptionTree(cache_size=8)
    tree.add("#", "c1", 1)
    seen = set()
    for index in range(100):
        assert tree.match(f"t/{index}") == [("c1", 1)]
        seen.add(tree.cached_topics)
        assert 1 <= tree.cached_topics <= 8
    assert seen == set(range(1, 9))
    uncached: SubscriptionTree[str, int] = SubscriptionTree(cache_size=0)
    uncached.add("#", "c1", 1)
    uncached.match("t")
    assert uncached.cached_topics == 0


def test_cache_is_bounded_by_result_items() -> None:
    tree: SubscriptionTree[str, int] = SubscriptionTree(cache_weight=10)
    for index in range(20):
        tree.add("big", f"c{index}", index)
    tree.add("small/+", "c1", 1)
    assert len(tree.match("big")) == 20
    assert tree.cached_topics == 0  # heavier than the whole budget: never cached
    for index in range(10):
        assert tree.match(f"small/{index}") == [("c1", 1)]
        assert tree._cache.weight <= 10
    assert 1 <= tree.cached_topics <= 5


def test_match_uncached_equals_match() -> None:
    tree: SubscriptionTree[str, int] = SubscriptionTree()
    tree.add("a/#", "c1", 1)
    tree.add("a/b", "c2", 2)
    assert sorted(tree.match_uncached("a/b")) == sorted(tree.match("a/b"))
    assert tree.match_uncached("a/b") is not tree.match("a/b")


# -- properties: the trie agrees with the reference matcher -------------------------------------

TOPIC_LEVELS = st.sampled_from(["a", "b", "", "$SYS", "$x"])
FILTER_LEVELS = st.sampled_from(["a", "b", "", "+", "$SYS"])
TOPICS = st.lists(TOPIC_LEVELS, min_size=1, max_size=4).map("/".join).filter(bool)
FILTERS = st.builds(
    lambda levels, hash_tail: "/".join(levels + (["#"] if hash_tail else [])),
    st.lists(FILTER_LEVELS, min_size=0, max_size=4),
    st.booleans(),
).filter(bool)
KEYS = st.sampled_from(["k1", "k2", "k3"])


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW_OK)
@given(
    subscriptions=st.lists(st.tuples(FILTERS, KEYS), max_size=25),
    topics=st.lists(TOPICS, min_size=1, max_size=10),
)
def test_match_agrees_with_brute_force(
    subscriptions: list[tuple[str, str]], topics: list[str]
) -> None:
    tree: SubscriptionTree[str, str] = SubscriptionTree()
    model: dict[tuple[str, str], str] = {}
    for flt, key in subscriptions:
        tree.add(flt, key, flt)
        model[(flt, key)] = flt
    assert len(tree) == len(model)
    assert sorted(tree.filters()) == sorted({flt for flt, _ in model})
    for topic in topics:
        expected = sorted(
            (key, value) for (flt, key), value in model.items() if filter_matches(flt, topic)
        )
        assert sorted(tree.match(topic)) == expected
        assert sorted(tree.match(topic)) == expected


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), FILTERS, KEYS, st.integers(0, 3)),
        st.tuples(st.just("remove"), FILTERS, KEYS, st.just(0)),
        st.tuples(st.just("match"), TOPICS, KEYS, st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW_OK)
@given(operations=OPERATIONS, cache_size=st.sampled_from([0, 2, 4096]))
def test_interleaved_changes_never_serve_stale_matches(
    operations: list[tuple[str, str, str, int]], cache_size: int
) -> None:
    tree: SubscriptionTree[str, int] = SubscriptionTree(cache_size)
    model: dict[tuple[str, str], int] = {}
    for operation, text, key, value in operations:
        if operation == "add":
            assert tree.add(text, key, value) == model.get((text, key))
            model[(text, key)] = value
        elif operation == "remove":
            assert tree.remove(text, key) == model.pop((text, key), None)
        else:
            expected = sorted((k, v) for (flt, k), v in model.items() if filter_matches(flt, text))
            assert sorted(tree.match(text)) == expected
        assert len(tree) == len(model)
        cache = tree._cache
        assert cache.weight == sum(len(result) + 1 for result in cache.entries.values())
    if not model:
        assert tree._trie.is_empty()


def test_very_deep_filters_and_topics() -> None:
    depth = 20000
    topic = "/".join(["x"] * depth)
    tree: SubscriptionTree[str, int] = SubscriptionTree()
    tree.add(topic, "literal", 1)
    tree.add("/".join(["x"] * (depth - 1) + ["+"]), "plus", 2)
    tree.add("x/#", "hash", 3)
    assert sorted(tree.match(topic)) == [("hash", 3), ("literal", 1), ("plus", 2)]
    assert tree.remove("/".join(["x"] * (depth - 1) + ["+"]), "plus") == 2
    assert sorted(tree.match(topic)) == [("hash", 3), ("literal", 1)]
    assert len(list(tree.filters())) == 2


@pytest.mark.parametrize("flt", ["a/b", "a/+"], ids=["literal", "wildcard"])
def test_returned_lists_are_snapshots(flt: str) -> None:
    tree: SubscriptionTree[str, int] = SubscriptionTree()
    tree.add("a/b", "c1", 1)
    before = tree.match("a/b")
    tree.add(flt, "c2", 2)
    tree.remove("a/b", "c1")
    assert before == [("c1", 1)]
    assert tree.match("a/b") == [("c2", 2)]
