"""Non-shared subscriptions: filter -> {key: value}, matched per published topic.

`K` identifies the subscriber (a session, or a cluster node in a route table) and `V` is the
subscription (options, identifier, ...). Shared subscriptions live in `shared_tree`.

Fan-out calls `match` for every PUBLISH, so results are cached per topic: a repeated publish to
the same topic costs one dict lookup. The returned list is shared with the cache and with every
other caller — treat it as read-only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from xmq.routing.filter_trie import (
    DEFAULT_CACHE_SIZE,
    DEFAULT_CACHE_WEIGHT,
    FilterTrie,
    MatchCache,
)

K = TypeVar("K")
V = TypeVar("V")


class SubscriptionTree(Generic[K, V]):
    """Non-shared subscriptions with a bounded per-topic match cache.

    Literal filters are found with one dict lookup, wildcard filters through a sparse trie
    (`filter_trie.FilterTrie`). Lists returned by `match` are snapshots: later changes to the
    tree never alter a list already handed out (they replace the cache entry instead).

    Filters must already be valid (`topics.validate_topic_filter` / `parse_shared`).
    The match cache holds at most `cache_size` topics and `cache_weight` result items;
    `cache_size=0` disables it.
    """

    __slots__ = ("_trie", "_cache", "_count")

    def __init__(
        self, cache_size: int = DEFAULT_CACHE_SIZE, cache_weight: int = DEFAULT_CACHE_WEIGHT
    ) -> None:
        # each filter's subscribers as key -> (key, value): match copies references only
        self._trie: FilterTrie[dict[K, tuple[K, V]]] = FilterTrie()
        self._cache: MatchCache[list[tuple[K, V]]] = MatchCache(cache_size, cache_weight)
        self._count = 0

    def add(self, flt: str, key: K, value: V) -> V | None:
        """Subscribe `key` to `flt`; return the value it replaces, or None when new."""
        subscribers = self._trie.get(flt)
        if subscribers is None:
            subscribers = {}
            self._trie.put(flt, subscribers)
        previous: V | None = None
        if key in subscribers:
            previous = subscribers[key][1]
        else:
            self._count += 1
        subscribers[key] = (key, value)
        self._cache.invalidate(flt)
        return previous

    def remove(self, flt: str, key: K) -> V | None:
        """Unsubscribe `key` from `flt`; return the removed value, or None when absent."""
        subscribers = self._trie.get(flt)
        if subscribers is None or key not in subscribers:
            return None
        value = subscribers.pop(key)[1]
        self._count -= 1
        if not subscribers:
            self._trie.discard(flt)
        self._cache.invalidate(flt)
        return value

    def get(self, flt: str, key: K) -> V | None:
        """The subscription of `key` to exactly `flt`, or None."""
        subscribers = self._trie.get(flt)
        entry = None if subscribers is None else subscribers.get(key)
        return None if entry is None else entry[1]

    def match(self, topic: str) -> list[tuple[K, V]]:
        """Every `(key, value)` whose filter matches `topic`, once per matching filter.

        A key subscribed with several overlapping filters appears once per filter. The list
        is cached and shared: do not mutate it.
        """
        cache = self._cache
        result = cache.entries.get(topic)
        if result is not None:
            return result
        matched = self._trie.match(topic)
        if len(matched) == 1:
            result = [*matched[0].values()]
        else:
            result = []
            for subscribers in matched:
                result.extend(subscribers.values())
        if cache.capacity:
            cache.put(topic, result)
        return result

    def match_uncached(self, topic: str) -> list[tuple[K, V]]:
        """`match` without reading or filling the cache (a fresh list)."""
        result: list[tuple[K, V]] = []
        for subscribers in self._trie.match(topic):
            result.extend(subscribers.values())
        return result

    def filters(self) -> Iterator[str]:
        """The distinct filters with at least one subscriber."""
        for flt, _ in self._trie.walk():
            yield flt

    def items(self) -> Iterator[tuple[str, K, V]]:
        """Every subscription as `(filter, key, value)`."""
        for flt, subscribers in self._trie.walk():
            for key, value in subscribers.values():
                yield flt, key, value

    def clear_cache(self) -> None:
        self._cache.clear()

    @property
    def cached_topics(self) -> int:
        """How many topics currently have a cached result."""
        return len(self._cache)

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0
