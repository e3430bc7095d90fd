"""The filter index and the per-topic match cache behind both subscription indexes.

Literal filters (no `+`/`#`) can only match the topic equal to them, so they live in a plain
dict: matching them costs one lookup whatever their number. Wildcard filters live in a trie of
levels: literal levels in `children`, the `+` child and the `#` child in their own slots, so
matching never looks wildcards up by string. The trie holds only wildcard filters, so it stays
sparse and a topic usually falls out of it at the first or second level.

Each filter carries an opaque payload (its subscriptions). Trie nodes with neither payload nor
children are pruned, so the trie's size follows the live filters.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Generic, TypeVar

from xmq.routing.topics import LEVEL_SEPARATOR, MULTI_LEVEL_WILDCARD, SINGLE_LEVEL_WILDCARD

P = TypeVar("P")
R = TypeVar("R", bound=Sized)

DEFAULT_CACHE_SIZE = 8192
DEFAULT_CACHE_WEIGHT = 1_000_000


def _is_literal(flt: str) -> bool:
    return SINGLE_LEVEL_WILDCARD not in flt and MULTI_LEVEL_WILDCARD not in flt


class FilterNode(Generic[P]):
    """One filter level of a wildcard filter. `payload` is None on interior nodes."""

    __slots__ = ("children", "plus", "multi", "payload")

    def __init__(self) -> None:
        self.children: dict[str, FilterNode[P]] = {}
        self.plus: FilterNode[P] | None = None
        self.multi: FilterNode[P] | None = None
        self.payload: P | None = None

    def is_empty(self) -> bool:
        return (
            self.payload is None and not self.children and self.plus is None and self.multi is None
        )


class FilterTrie(Generic[P]):
    """filter -> payload; `match(topic)` gives the payloads of every matching filter."""

    __slots__ = ("_literal", "_root", "_wildcards")

    def __init__(self) -> None:
        self._literal: dict[str, P] = {}
        self._root: FilterNode[P] = FilterNode()
        self._wildcards = 0

    def get(self, flt: str) -> P | None:
        """The payload of exactly `flt`, or None."""
        if _is_literal(flt):
            return self._literal.get(flt)
        node = self._find(flt)
        return None if node is None else node.payload

    def put(self, flt: str, payload: P) -> None:
        """Set the payload of `flt` (adding the filter when new)."""
        if _is_literal(flt):
            self._literal[flt] = payload
            return
        node = self._node_for(flt)
        if node.payload is None:
            self._wildcards += 1
        node.payload = payload

    def discard(self, flt: str) -> None:
        """Forget `flt` and its payload (no-op when absent)."""
        if _is_literal(flt):
            self._literal.pop(flt, None)
            return
        node = self._find(flt)
        if node is None or node.payload is None:
            return
        node.payload = None
        self._wildcards -= 1
        self._prune(flt)

    def is_empty(self) -> bool:
        return not self._literal and self._root.is_empty()

    def _node_for(self, flt: str) -> FilterNode[P]:
        node = self._root
        for level in flt.split(LEVEL_SEPARATOR):
            if level == SINGLE_LEVEL_WILDCARD:
                child = node.plus
                if child is None:
                    child = node.plus = FilterNode()
            elif level == MULTI_LEVEL_WILDCARD:
                child = node.multi
                if child is None:
                    child = node.multi = FilterNode()
            else:
                child = node.children.get(level)
                if child is None:
                    child = node.children[level] = FilterNode()
            node = child
        return node

    def _find(self, flt: str) -> FilterNode[P] | None:
        node: FilterNode[P] | None = self._root
        for level in flt.split(LEVEL_SEPARATOR):
            if node is None:
                return None
            if level == SINGLE_LEVEL_WILDCARD:
                node = node.plus
            elif level == MULTI_LEVEL_WILDCARD:
                node = node.multi
            else:
                node = node.children.get(level)
        return node

    def _prune(self, flt: str) -> None:
        """Drop the empty nodes on the path of `flt`, deepest first."""
        path: list[tuple[FilterNode[P], str]] = []
        node: FilterNode[P] | None = self._root
        for level in flt.split(LEVEL_SEPARATOR):
            if node is None:
                return
            path.append((node, level))
            if level == SINGLE_LEVEL_WILDCARD:
                node = node.plus
            elif level == MULTI_LEVEL_WILDCARD:
                node = node.multi
            else:
                node = node.children.get(level)
        if node is None:
            return
        for parent, level in reversed(path):
            if not node.is_empty():
                return
            if level == SINGLE_LEVEL_WILDCARD:
                parent.plus = None
            elif level == MULTI_LEVEL_WILDCARD:
                parent.multi = None
            else:
                del parent.children[level]
            node = parent

    def match(self, topic: str) -> list[P]:
        """Payloads of every filter matching topic name `topic`, one per filter.

        A topic whose first level starts with `$` skips the root's `+` and `#` children.
        """
        payloads: list[P] = []
        exact = self._literal.get(topic)
        if exact is not None:
            payloads.append(exact)
        if not self._wildcards:
            return payloads
        levels = topic.split(LEVEL_SEPARATOR)
        root = self._root
        if topic[:1] == "$":
            first = root.children.get(levels[0])
            if first is None:
                return payloads
            nodes = [first]
            levels = levels[1:]
        else:
            nodes = [root]
        for level in levels:
            following: list[FilterNode[P]] = []
            for node in nodes:
                multi = node.multi
                if multi is not None and multi.payload is not None:
                    payloads.append(multi.payload)
                child = node.children.get(level)
                if child is not None:
                    following.append(child)
                if node.plus is not None:
                    following.append(node.plus)
            if not following:
                return payloads
            nodes = following
        for node in nodes:
            if node.payload is not None:
                payloads.append(node.payload)
            multi = node.multi
            if multi is not None and multi.payload is not None:
                payloads.append(multi.payload)
        return payloads

    def walk(self) -> Iterator[tuple[str, P]]:
        """Every `(filter, payload)` held: literal filters first, then the trie depth first."""
        yield from self._literal.items()
        stack: list[tuple[FilterNode[P], tuple[str, ...]]] = [(self._root, ())]
        while stack:
            node, levels = stack.pop()
            if node.payload is not None and levels:
                yield LEVEL_SEPARATOR.join(levels), node.payload
            stack.extend((child, (*levels, level)) for level, child in node.children.items())
            if node.plus is not None:
                stack.append((node.plus, (*levels, SINGLE_LEVEL_WILDCARD)))
            if node.multi is not None:
                stack.append((node.multi, (*levels, MULTI_LEVEL_WILDCARD)))

    def __len__(self) -> int:
        """The number of filters held."""
        return len(self._literal) + self._wildcards


class MatchCache(Generic[R]):
    """Bounded topic -> match result cache.

    `entries` is public so that a hot `match` can do a single dict lookup. A change to filter
    `flt` calls `invalidate(flt)`: a literal filter can only affect the topic equal to it, a
    wildcard filter clears everything. Bounds: at most `capacity` topics and `max_weight`
    result items in total (so a few huge fan-out lists cannot pin unbounded memory); when a
    bound is reached the cache is cleared (evicting one by one from a dict's front degrades to
    O(n) per eviction in CPython) and warms up again from the next publishes.
    """

    __slots__ = ("entries", "capacity", "max_weight", "_weight")

    def __init__(
        self, capacity: int = DEFAULT_CACHE_SIZE, max_weight: int = DEFAULT_CACHE_WEIGHT
    ) -> None:
        self.entries: dict[str, R] = {}
        self.capacity = capacity
        self.max_weight = max_weight
        self._weight = 0

    def put(self, topic: str, result: R) -> None:
        """Cache `result` for `topic`."""
        weight = len(result) + 1
        if weight > self.max_weight or self.capacity <= 0:
            return
        entries = self.entries
        if len(entries) >= self.capacity or self._weight + weight > self.max_weight:
            entries.clear()
            self._weight = 0
        entries[topic] = result
        self._weight += weight

    def invalidate(self, flt: str) -> None:
        if SINGLE_LEVEL_WILDCARD in flt or MULTI_LEVEL_WILDCARD in flt:
            self.clear()
        elif flt in self.entries:
            self.clear_topic(flt)

    def clear_topic(self, topic: str) -> None:
        """Drop the cached result of one topic (cheap; call only when it is cached)."""
        result = self.entries.pop(topic)
        self._weight -= 1 + len(result)

    def clear(self) -> None:
        self.entries.clear()
        self._weight = 0

    @property
    def weight(self) -> int:
        """Cached result items plus one per topic."""
        return self._weight

    def __len__(self) -> int:
        return len(self.entries)
