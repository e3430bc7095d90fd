"""MatchCache: the bounded per-topic cache (usable by the core for its own per-topic plans)."""

from __future__ import annotations

import pytest

from xmq.routing.filter_trie import MatchCache


def test_literal_invalidation_drops_only_that_topic() -> None:
    cache: MatchCache[list[int]] = MatchCache()
    cache.put("a/b", [1, 2])
    cache.put("a/c", [3])
    assert cache.weight == 5
    cache.invalidate("a/b")
    assert cache.entries == {"a/c": [3]}
    assert cache.weight == 2
    cache.invalidate("x/y")  # not cached: nothing happens
    assert cache.entries == {"a/c": [3]}


@pytest.mark.parametrize("flt", ["+", "#", "a/+/c", "a/#"], ids=["plus", "hash", "mid", "tail"])
def test_wildcard_invalidation_clears_everything(flt: str) -> None:
    cache: MatchCache[list[int]] = MatchCache()
    cache.put("a/b", [1])
    cache.put("z", [])
    cache.invalidate(flt)
    assert len(cache) == 0
    assert cache.weight == 0


def test_bounds() -> None:
    cache: MatchCache[list[int]] = MatchCache(capacity=2, max_weight=6)
    cache.put("a", [1])
    cache.put("b", [1])
    cache.put("c", [1])  # third topic: cleared first
    assert cache.entries == {"c": [1]}
    cache.put("d", [1, 2, 3])  # 2 + 4 = 6 fits
    assert cache.weight == 6
    cache.put("e", [])  # weight 7 > 6: cleared first
    assert cache.entries == {"e": []}
    cache.put("huge", list(range(10)))  # heavier than the budget: never cached
    assert "huge" not in cache.entries
    disabled: MatchCache[list[int]] = MatchCache(capacity=0)
    disabled.put("a", [])
    assert len(disabled) == 0
