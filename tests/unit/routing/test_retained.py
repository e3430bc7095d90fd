"""RetainedStore: set/get/delete, filter look-ups, `$`-topics, sweeping."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xmq.routing.retained import RetainedStore
from xmq.routing.topics import filter_matches

TOPICS = [
    "sport/tennis/player1",
    "sport/tennis/player1/ranking",
    "sport/tennis/player2",
    "sport/golf",
    "/finance",
    "finance",
    "a//c",
    "$SYS/broker/uptime",
    "$SYS",
    "a/$x",
]

# machines running several suites at once are slow: no per-example deadline
SLOW_OK = [HealthCheck.too_slow]


@pytest.fixture
def store() -> RetainedStore[str]:
    retained: RetainedStore[str] = RetainedStore()
    for topic in TOPICS:
        retained.set(topic, f"msg:{topic}")
    return retained


MATCHES = [
    ("hash_alone_skips_sys", "#", [t for t in TOPICS if not t.startswith("$")]),
    ("hash_with_parent", "sport/tennis/player1/#", TOPICS[:2]),
    ("plus_one_level", "sport/tennis/+", ["sport/tennis/player1", "sport/tennis/player2"]),
    ("plus_middle", "sport/+/player1", ["sport/tennis/player1"]),
    ("plus_plus_leading_slash", "+/+", ["/finance", "sport/golf", "a/$x"]),
    ("plus_alone", "+", ["finance"]),
    ("plus_empty_level", "a/+/c", ["a//c"]),
    ("sys_hash", "$SYS/#", ["$SYS/broker/uptime", "$SYS"]),
    ("sys_plus", "$SYS/+/uptime", ["$SYS/broker/uptime"]),
    ("plus_skips_sys", "+/broker/uptime", []),
    ("literal", "sport/golf", ["sport/golf"]),
    ("literal_missing", "sport/chess", []),
    ("literal_interior_node", "sport/tennis", []),
    ("plus_hash", "+/tennis/#", TOPICS[:3]),
]


@pytest.mark.parametrize(
    ("flt", "expected"), [(f, e) for _, f, e in MATCHES], ids=[i for i, _, _ in MATCHES]
)
def test_match(store: RetainedStore[str], flt: str, expected: list[str]) -> None:
    assert sorted(store.match(flt)) == sorted((t, f"msg:{t}") for t in expected)


def test_set_replace_get_delete(store: RetainedStore[str]) -> None:
    assert len(store) == len(TOPICS)
    assert store.get("sport/golf") == "msg:sport/golf"
    store.set("sport/golf", "new")
    assert store.get("sport/golf") == "new"
    assert len(store) == len(TOPICS)
    assert store.match("sport/+") == [("sport/golf", "new")]
    assert store.delete("sport/golf") is True
    assert store.delete("sport/golf") is False
    assert store.get("sport/golf") is None
    assert "sport/golf" not in store
    assert "finance" in store
    assert store.match("sport/+") == []
    assert len(store) == len(TOPICS) - 1


def test_delete_keeps_descendants_and_prunes_empty_branches() -> None:
    store: RetainedStore[int] = RetainedStore()
    store.set("a/b", 1)
    store.set("a/b/c/d", 2)
    assert store.delete("a/b")
    assert store.match("a/#") == [("a/b/c/d", 2)]
    assert store.delete("a/b/c/d")
    assert store._root.children == {}
    assert not store


def test_remove_where_and_items(store: RetainedStore[str]) -> None:
    removed = store.remove_where(lambda topic, _message: topic.startswith("sport/"))
    assert removed == 4
    assert sorted(topic for topic, _ in store.items()) == sorted(
        t for t in TOPICS if not t.startswith("sport/")
    )
    assert store.match("sport/#") == []
    assert store.remove_where(lambda _topic, _message: False) == 0


TOPIC_LEVELS = st.sampled_from(["a", "b", "", "$SYS", "$x"])
FILTER_LEVELS = st.sampled_from(["a", "b", "", "+", "$SYS"])
TOPIC_NAMES = st.lists(TOPIC_LEVELS, min_size=1, max_size=4).map("/".join).filter(bool)
FILTERS = st.builds(
    lambda levels, hash_tail: "/".join(levels + (["#"] if hash_tail else [])),
    st.lists(FILTER_LEVELS, min_size=0, max_size=4),
    st.booleans(),
).filter(bool)


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW_OK)
@given(
    topics=st.lists(TOPIC_NAMES, max_size=20),
    deleted=st.lists(TOPIC_NAMES, max_size=5),
    filters=st.lists(FILTERS, min_size=1, max_size=8),
)
def test_match_agrees_with_brute_force(
    topics: list[str], deleted: list[str], filters: list[str]
) -> None:
    store: RetainedStore[str] = RetainedStore()
    model: dict[str, str] = {}
    for index, topic in enumerate(topics):
        store.set(topic, f"{topic}#{index}")
        model[topic] = f"{topic}#{index}"
    for topic in deleted:
        assert store.delete(topic) is (model.pop(topic, None) is not None)
    assert len(store) == len(model)
    for flt in filters:
        expected = sorted((t, m) for t, m in model.items() if filter_matches(flt, t))
        assert sorted(store.match(flt)) == expected


def test_very_deep_topics() -> None:
    depth = 20000
    store: RetainedStore[int] = RetainedStore()
    topic = "/".join(["x"] * depth)
    store.set(topic, 1)
    store.set("x", 2)
    assert sorted(store.match("#")) == [("x", 2), (topic, 1)]
    assert store.match("/".join(["x"] * (depth - 1) + ["+"])) == [(topic, 1)]
    assert store.delete(topic)
    assert store.match("x/#") == [("x", 2)]
    assert list(store._root.children["x"].children) == []
