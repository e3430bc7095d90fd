"""Shared subscriptions `$share/<group>/<filter>`: groups matched per topic, one member picked.

A `SharedGroup` is identified by `(group, topic_filter)`; its members are the subscribers
(`K` -> `V`) in join order. The broker delivers each message to one member per matching group,
picked round-robin (`pick`), or to another member when one must be avoided (`pick_excluding`,
e.g. re-dispatching a message the departed member never acknowledged).

`SharedSubscriptions.match(topic)` returns each matching group once. The per-topic cache only
depends on which groups exist, so members joining or leaving an existing group keep it warm.
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Mapping
from typing import Generic, TypeVar

from xmq.routing.filter_trie import (
    DEFAULT_CACHE_SIZE,
    DEFAULT_CACHE_WEIGHT,
    FilterTrie,
    MatchCache,
)

K = TypeVar("K")
V = TypeVar("V")


class SharedGroup(Generic[K, V]):
    """The members of one `(group, topic_filter)` with a round-robin cursor."""

    __slots__ = ("group", "topic_filter", "_members", "_order", "_cursor")

    def __init__(self, group: str, topic_filter: str) -> None:
        self.group = group
        self.topic_filter = topic_filter
        self._members: dict[K, V] = {}
        # (key, value) in join order: pick returns the stored tuple, allocation-free
        self._order: list[tuple[K, V]] = []
        self._cursor = 0

    @property
    def members(self) -> Mapping[K, V]:
        """Members in join order (read-only view)."""
        return self._members

    def get(self, key: K) -> V | None:
        return self._members.get(key)

    def pick(self) -> tuple[K, V] | None:
        """The next member in round-robin order, or None when the group is empty."""
        order = self._order
        if not order:
            return None
        index = self._cursor
        if index >= len(order):
            index = 0
        self._cursor = index + 1
        return order[index]

    def pick_excluding(self, keys: Container[K]) -> tuple[K, V] | None:
        """The next member in round-robin order that is not in `keys`, or None."""
        order = self._order
        count = len(order)
        if count == 0:
            return None
        start = self._cursor if self._cursor < count else 0
        for step in range(count):
            index = (start + step) % count
            entry = order[index]
            if entry[0] not in keys:
                self._cursor = index + 1
                return entry
        return None

    def _index_of(self, key: K) -> int:
        for index, (member, _) in enumerate(self._order):
            if member == key:
                return index
        raise KeyError(key)

    def _put(self, key: K, value: V) -> V | None:
        members = self._members
        if key in members:
            previous = members[key]
            members[key] = value
            self._order[self._index_of(key)] = (key, value)
            return previous
        members[key] = value
        self._order.append((key, value))
        return None

    def _discard(self, key: K) -> V:
        value = self._members.pop(key)
        index = self._index_of(key)
        del self._order[index]
        if index < self._cursor:
            self._cursor -= 1
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._members

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[K]:
        return iter(self._members)

    def __repr__(self) -> str:
        return f"SharedGroup({self.group!r}, {self.topic_filter!r}, members={len(self)})"


class SharedSubscriptions(Generic[K, V]):
    """All shared subscriptions, indexed by filter (trie) and by member key.

    Filters must already be valid (use `topics.parse_shared`). The match cache holds at most
    `cache_size` topics and `cache_weight` result items; `cache_size=0` disables it.
    """

    __slots__ = ("_trie", "_cache", "_by_key", "_count", "_group_count")

    def __init__(
        self, cache_size: int = DEFAULT_CACHE_SIZE, cache_weight: int = DEFAULT_CACHE_WEIGHT
    ) -> None:
        self._trie: FilterTrie[dict[str, SharedGroup[K, V]]] = FilterTrie()
        self._cache: MatchCache[list[SharedGroup[K, V]]] = MatchCache(cache_size, cache_weight)
        self._by_key: dict[K, dict[tuple[str, str], SharedGroup[K, V]]] = {}
        self._count = 0
        self._group_count = 0

    def add(self, group: str, flt: str, key: K, value: V) -> V | None:
        """Make `key` a member of `(group, flt)`; return the value it replaces, or None."""
        groups = self._trie.get(flt)
        if groups is None:
            groups = {}
            self._trie.put(flt, groups)
        shared = groups.get(group)
        if shared is None:
            shared = groups[group] = SharedGroup(group, flt)
            self._group_count += 1
            self._cache.invalidate(flt)
        if key in shared:
            return shared._put(key, value)
        shared._put(key, value)
        self._count += 1
        self._by_key.setdefault(key, {})[(group, flt)] = shared
        return None

    def remove(self, group: str, flt: str, key: K) -> V | None:
        """Remove `key` from `(group, flt)`; return its value, or None when it was no member."""
        groups = self._trie.get(flt)
        if groups is None:
            return None
        shared = groups.get(group)
        if shared is None or key not in shared:
            return None
        value = shared._discard(key)
        self._count -= 1
        memberships = self._by_key[key]
        del memberships[(group, flt)]
        if not memberships:
            del self._by_key[key]
        if not shared:
            del groups[group]
            self._group_count -= 1
            if not groups:
                self._trie.discard(flt)
            self._cache.invalidate(flt)
        return value

    def get_group(self, group: str, flt: str) -> SharedGroup[K, V] | None:
        groups = self._trie.get(flt)
        return None if groups is None else groups.get(group)

    def match(self, topic: str) -> list[SharedGroup[K, V]]:
        """Every non-empty group whose filter matches `topic`, each once.

        The list is cached and shared: do not mutate it.
        """
        entries = self._cache.entries
        result = entries.get(topic)
        if result is not None:
            return result
        result = []
        for groups in self._trie.match(topic):
            result.extend(groups.values())
        self._cache.put(topic, result)
        return result

    def groups_of(self, key: K) -> list[SharedGroup[K, V]]:
        """The groups `key` is a member of."""
        memberships = self._by_key.get(key)
        return list(memberships.values()) if memberships else []

    def groups(self) -> Iterator[SharedGroup[K, V]]:
        """Every non-empty group (for cluster route snapshots)."""
        for _, groups in self._trie.walk():
            yield from groups.values()

    @property
    def group_count(self) -> int:
        return self._group_count

    def __len__(self) -> int:
        """The number of memberships (member, group) held."""
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0
